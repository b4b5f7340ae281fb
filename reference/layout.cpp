// FSDP unit layout (layout.hpp).
#include "reference/layout.hpp"

namespace shardplan::reference {

Dims dims_make(const ModelSpec& m, int64_t batch, int64_t seq) {
  Dims d;
  d.batch = batch;
  d.seq = seq;
  d.hidden = m.hidden;
  d.heads = m.heads;
  d.kv_heads = m.kv_heads > 0 ? m.kv_heads : m.heads;
  d.head_dim = model_head_dim(m);
  d.ffn = m.ffn_hidden;
  d.swiglu = m.mlp == MlpKind::swiglu;
  d.fc1_width = d.swiglu ? 2 * m.ffn_hidden : m.ffn_hidden;
  d.vocab = m.vocab;
  d.padded_vocab = model_padded_vocab(m);
  d.max_seq = m.seq;
  d.rms = m.norm == NormKind::rmsnorm;
  d.rope = m.position == PositionKind::rotary;
  d.learned_pos = m.position == PositionKind::learned;
  d.tied = m.tied_embeddings;
  d.qkv_bias = m.qkv_bias;
  d.out_bias = m.out_bias;
  d.norm_bias = !d.rms && m.norm_bias;  // RMSNorm has no bias (planner/model.cpp norm_params)
  return d;
}

namespace {

void unit_add(UnitLayout& u, const std::string& name, int64_t numel, InitKind init) {
  u.tensors.push_back(TensorSlot{name, u.numel, numel, init});
  u.numel += numel;
}

void unit_pad(UnitLayout& u, int world) {
  u.world = world;
  u.padded = (u.numel + world - 1) / world * world;
}

}  // namespace

std::vector<UnitLayout> layout_make(const Dims& d, int64_t layers, int world) {
  const int64_t C = d.hidden, QKV = d.attention().qkv_width(), QW = d.attention().q_width();
  std::vector<UnitLayout> units;
  UnitLayout emb{"embedding", {}, 0, 0, 1};
  unit_add(emb, "wte", d.padded_vocab * C, InitKind::normal);
  if (d.learned_pos) unit_add(emb, "wpe", d.max_seq * C, InitKind::normal);
  unit_pad(emb, world);
  units.push_back(emb);
  for (int64_t l = 0; l < layers; ++l) {
    UnitLayout b{"block." + std::to_string(l), {}, 0, 0, 1};
    unit_add(b, "ln1_w", C, InitKind::ones);
    if (d.norm_bias) unit_add(b, "ln1_b", C, InitKind::zeros);
    unit_add(b, "qkv_w", QKV * C, InitKind::normal);
    if (d.qkv_bias) unit_add(b, "qkv_b", QKV, InitKind::zeros);
    unit_add(b, "out_w", C * QW, InitKind::normal_residual);
    if (d.out_bias) unit_add(b, "out_b", C, InitKind::zeros);
    unit_add(b, "ln2_w", C, InitKind::ones);
    if (d.norm_bias) unit_add(b, "ln2_b", C, InitKind::zeros);
    unit_add(b, "fc1_w", d.fc1_width * C, InitKind::normal);
    if (d.out_bias) unit_add(b, "fc1_b", d.fc1_width, InitKind::zeros);
    unit_add(b, "fc2_w", C * d.ffn, InitKind::normal_residual);
    if (d.out_bias) unit_add(b, "fc2_b", C, InitKind::zeros);
    unit_pad(b, world);
    units.push_back(b);
  }
  UnitLayout head{"head", {}, 0, 0, 1};
  unit_add(head, "lnf_w", C, InitKind::ones);
  if (d.norm_bias) unit_add(head, "lnf_b", C, InitKind::zeros);
  if (!d.tied) unit_add(head, "lm_head", d.padded_vocab * C, InitKind::normal);
  unit_pad(head, world);
  units.push_back(head);
  return units;
}

int64_t layout_params(const std::vector<UnitLayout>& units) {
  int64_t n = 0;
  for (const auto& u : units) n += u.numel;
  return n;
}

const TensorSlot* UnitLayout::find(const std::string& n) const {
  for (const auto& t : tensors)
    if (t.name == n) return &t;
  return nullptr;
}

namespace {
floatX* at(const UnitLayout& u, floatX* base, DType dtype, const char* name) {
  const TensorSlot* t = u.find(name);
  return t ? x_offset(base, t->offset, dtype) : nullptr;
}
}  // namespace

BlockView block_view(const UnitLayout& u, floatX* base, DType t) {
  BlockView v;
  v.ln1_w = at(u, base, t, "ln1_w");
  v.ln1_b = at(u, base, t, "ln1_b");
  v.qkv_w = at(u, base, t, "qkv_w");
  v.qkv_b = at(u, base, t, "qkv_b");
  v.out_w = at(u, base, t, "out_w");
  v.out_b = at(u, base, t, "out_b");
  v.ln2_w = at(u, base, t, "ln2_w");
  v.ln2_b = at(u, base, t, "ln2_b");
  v.fc1_w = at(u, base, t, "fc1_w");
  v.fc1_b = at(u, base, t, "fc1_b");
  v.fc2_w = at(u, base, t, "fc2_w");
  v.fc2_b = at(u, base, t, "fc2_b");
  return v;
}

EmbeddingView embedding_view(const UnitLayout& u, floatX* base, DType t) {
  return EmbeddingView{at(u, base, t, "wte"), at(u, base, t, "wpe")};
}

HeadView head_view(const UnitLayout& u, floatX* base, DType t) {
  return HeadView{at(u, base, t, "lnf_w"), at(u, base, t, "lnf_b"), at(u, base, t, "lm_head")};
}

}  // namespace shardplan::reference
