#include "io/preset_store.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "io/embedded_presets.hpp"
#include "io/input_file.hpp"
#include "io/model_moe_keys.hpp"
#include "io/yaml_fields.hpp"
#include "planner/comm_cost.hpp"
#include "planner/error.hpp"
#include "planner/precision.hpp"
#include "planner/strategy.hpp"

namespace shardplan {

namespace fs = std::filesystem;
using yaml::Bound;

const char* to_string(PresetKind k) {
  switch (k) {
    case PresetKind::model: return "model";
    case PresetKind::gpu: return "gpu";
    case PresetKind::cluster: return "cluster";
  }
  return "?";
}

namespace {

constexpr PresetKind kAllKinds[] = {PresetKind::model, PresetKind::gpu, PresetKind::cluster};

std::size_t index_of(PresetKind k) { return static_cast<std::size_t>(k); }

// The sub-folder of a presets folder holding one kind.
const char* folder_of(PresetKind k) {
  switch (k) {
    case PresetKind::model: return "models";
    case PresetKind::gpu: return "gpus";
    case PresetKind::cluster: return "clusters";
  }
  return "?";
}

PresetKind kind_from_string(std::string_view s) {
  for (PresetKind k : kAllKinds) {
    if (s == to_string(k)) return k;
  }
  // Only the generated table calls this, with kinds spelled by cmake/embed_presets.cmake.
  throw std::logic_error(fmt::format("embedded preset of unknown kind '{}'", s));
}

// ---- name checks -------------------------------------------------------------------------------------------

// Reads `name`. Presets found by name (embedded or in a --presets-dir) must be called like their file, or
// `presets show X` and `--preset X` would disagree about what X is.
std::string read_name(const yaml::MapReader& r, const std::string* file_stem) {
  std::string name = r.string("name");
  if (name.empty()) throw InputError(fmt::format("{}: 'name' must not be empty", r.where("name")));
  if (file_stem != nullptr && name != *file_stem) {
    throw InputError(fmt::format("{}: name '{}' must equal the file name '{}' (write 'name: {}' or rename the file "
                                 "to {}.yaml)",
                                 r.where("name"), yaml::printable(name), *file_stem, *file_stem, yaml::printable(name)));
  }
  return name;
}

bool is_word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Position of `word` in `text` as a whole word, or npos.
std::size_t find_word(const std::string& text, const std::string& word) {
  for (std::size_t pos = text.find(word); pos != std::string::npos; pos = text.find(word, pos + 1)) {
    bool starts = pos == 0 || !is_word_char(text[pos - 1]);
    std::size_t end = pos + word.size();
    bool ends = end == text.size() || !is_word_char(text[end]);
    if (starts && ends) return pos;
  }
  return std::string::npos;
}

// "origin:line" of the key the planner's message mentions first (it names fields, not lines), else "origin".
std::string locate_message(const yaml::MapReader& r, const std::string& message) {
  // The planner starts with "model 'NAME': "; a key-like word in the name must not count.
  std::size_t after_subject = message.find(": ");
  std::string body = after_subject == std::string::npos ? message : message.substr(after_subject + 2);
  std::size_t best = std::string::npos;
  std::string location = r.origin();
  for (const auto& item : r.node()) {
    std::size_t pos = find_word(body, item.first.Scalar());
    if (pos < best) {
      best = pos;
      location = yaml::where(r.origin(), item.second);
    }
  }
  return location;
}

// The planner's semantic checks (kv_heads divides heads, ...) with the file and line added.
template <class Validate>
void validate_in_file(const yaml::MapReader& r, Validate validate) {
  try {
    validate();
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: {}", locate_message(r, e.what()), e.what()));
  }
}

// ---- parsing ------------------------------------------------------------------------------------------------

ModelSpec read_model(const std::string& text, const std::string& origin, const std::string* file_stem) {
  yaml::MapReader r(yaml::load_document(text, origin), origin, "model");
  std::vector<std::string_view> keys = {"name", "description", "source", "layers", "hidden", "heads", "kv_heads",
                                        "head_dim", "ffn_hidden", "vocab", "vocab_pad_to", "seq", "mlp", "norm",
                                        "position", "tied_embeddings", "qkv_bias", "out_bias", "norm_bias", "dropout",
                                        "rotary_base", "norm_eps"};
  keys.insert(keys.end(), moe_model_keys().begin(), moe_model_keys().end());  // io/model_moe_keys.hpp
  r.check_keys(keys);
  ModelSpec m;
  m.name = read_name(r, file_stem);
  m.description = r.string_or("description", "");
  m.source = r.string_or("source", "");
  m.layers = r.integer("layers", Bound::positive);
  m.hidden = r.integer("hidden", Bound::positive);
  m.heads = r.integer("heads", Bound::positive);
  m.kv_heads = r.integer("kv_heads", Bound::positive);
  m.head_dim = r.integer_or("head_dim", 0, Bound::positive);  // 0 = hidden / heads
  m.ffn_hidden = r.integer("ffn_hidden", Bound::positive);
  m.vocab = r.integer("vocab", Bound::positive);
  m.vocab_pad_to = r.integer_or("vocab_pad_to", 1, Bound::positive);
  m.seq = r.integer("seq", Bound::positive);
  m.mlp = r.choice("mlp", parse_mlp, "gelu, swiglu");
  m.norm = r.choice("norm", parse_norm, "layernorm, rmsnorm");
  m.position = r.choice_or("position", PositionKind::rotary, parse_position, "rotary, learned, alibi, none");
  m.tied_embeddings = r.boolean("tied_embeddings");
  m.qkv_bias = r.boolean_or("qkv_bias", false);
  m.out_bias = r.boolean_or("out_bias", false);
  m.norm_bias = r.boolean_or("norm_bias", true);
  m.dropout = r.boolean_or("dropout", false);
  m.rotary_base = r.number_or("rotary_base", m.rotary_base, Bound::positive);  // for --emit (planner/model.hpp)
  m.norm_eps = r.number_or("norm_eps", m.norm_eps, Bound::positive);
  read_moe_keys(r, m);
  validate_in_file(r, [&] { validate_model(m); });
  return m;
}

GpuSpec read_gpu(const std::string& text, const std::string& origin, const std::string* file_stem) {
  yaml::MapReader r(yaml::load_document(text, origin), origin, "gpu");
  r.check_keys({"name", "description", "source", "architecture", "memory_gib", "bf16_tflops", "fp16_tflops",
                "tf32_tflops", "fp8_tflops", "fp32_tflops", "hbm_gbps", "sm_count", "l2_mib", "nvlink_gbps", "pcie_gbps",
                "tdp_w", "power_limit_w"});
  GpuSpec g;
  g.name = read_name(r, file_stem);
  g.description = r.string_or("description", "");
  g.source = r.string_or("source", "");
  g.architecture = r.choice_or("architecture", GpuArchitecture::unknown, parse_gpu_architecture,
                               "volta, ampere, ada, hopper, blackwell, cdna3, cdna4");
  g.memory_gib = r.number("memory_gib", Bound::positive);
  g.bf16_tflops = r.number("bf16_tflops", Bound::non_negative);  // 0 = no bf16 (V100, T4)
  g.fp16_tflops = r.number("fp16_tflops", Bound::positive);
  g.tf32_tflops = r.number_or("tf32_tflops", 0, Bound::non_negative);
  g.fp8_tflops = r.number_or("fp8_tflops", 0, Bound::non_negative);  // 0 = no FP8 (recorded, not yet modelled)
  g.fp32_tflops = r.number("fp32_tflops", Bound::positive);
  g.hbm_gbps = r.number("hbm_gbps", Bound::positive);
  g.sm_count = r.integer("sm_count", Bound::positive);
  g.l2_mib = r.number_or("l2_mib", 0, Bound::positive);
  g.nvlink_gbps = r.number("nvlink_gbps", Bound::non_negative);  // 0 = PCIe only
  g.pcie_gbps = r.number("pcie_gbps", Bound::positive);
  g.tdp_w = r.number_or("tdp_w", 0, Bound::positive);
  g.power_limit_w = r.number_or("power_limit_w", 0, Bound::positive);
  validate_in_file(r, [&] { validate_gpu(g); });
  return g;
}

IntraNodeLink read_intra_node(const yaml::MapReader& r) {
  r.check_keys({"link", "gbps", "latency_us"});
  IntraNodeLink link;
  link.kind = r.choice("link", parse_link, "nvswitch, nvlink, xgmi, pcie");
  link.gbps = r.number("gbps", Bound::positive);
  link.latency_us = r.number("latency_us", Bound::positive);
  return link;
}

InterNodeLink read_inter_node(const yaml::MapReader& r) {
  r.check_keys({"nics_per_node", "nic_gbps", "latency_us", "gpus_per_leaf", "spine_oversubscription"});
  InterNodeLink link;
  link.nics_per_node = r.integer("nics_per_node", Bound::non_negative);  // 0 = single node only
  link.nic_gbps = r.number("nic_gbps", Bound::non_negative);
  link.latency_us = r.number("latency_us", Bound::non_negative);
  link.gpus_per_leaf = r.integer_or("gpus_per_leaf", 0, Bound::positive);  // 0 = one non-blocking tier
  link.spine_oversubscription = r.number_or("spine_oversubscription", 1, Bound::positive);
  return link;
}

std::string unknown_preset_message(PresetKind kind, const std::string& name, const std::vector<std::string>& known);

ClusterSpec read_cluster(const std::string& text, const std::string& origin, const std::string* file_stem,
                         const PresetStore& store) {
  yaml::MapReader r(yaml::load_document(text, origin), origin, "cluster");
  r.check_keys({"name", "description", "source", "gpu", "gpus_per_node", "nvlink_domain_gpus", "max_gpus",
                "intra_node", "inter_node", "host_memory_gib"});
  ClusterSpec c;
  c.name = read_name(r, file_stem);
  c.description = r.string_or("description", "");
  c.source = r.string_or("source", "");
  c.gpu_name = r.string("gpu");
  if (store.find(PresetKind::gpu, c.gpu_name) == nullptr) {
    throw InputError(fmt::format("{}: 'gpu': {}", r.where("gpu"),
                                 unknown_preset_message(PresetKind::gpu, c.gpu_name, store.names(PresetKind::gpu))));
  }
  c.gpu = store.gpu(c.gpu_name);
  c.gpus_per_node = r.integer("gpus_per_node", Bound::positive);
  c.nvlink_domain_gpus = r.integer_or("nvlink_domain_gpus", 0, Bound::positive);  // 0 = one host
  c.max_gpus = r.integer_or("max_gpus", 0, Bound::positive);                      // 0 = any number of nodes
  c.intra = read_intra_node(r.map("intra_node"));
  c.inter = read_inter_node(r.map("inter_node"));
  c.host_memory_gib = r.number_or("host_memory_gib", 0, Bound::positive);
  validate_in_file(r, [&] { validate_cluster(c); });
  return c;
}


// ---- calibration profiles (`shardplan calibrate`; schema in calibrate/README.md) ------------------------------

bool is_profile(const YAML::Node& doc) {
  return doc.IsMap() && doc["kind"] && doc["kind"].IsScalar() && doc["kind"].Scalar() == "calibration-profile";
}

// A row of numbers ([bytes, median_s, ...]) of exactly `width` entries.
std::vector<double> read_row(const YAML::Node& row, const std::string& origin, const std::string& what,
                             std::size_t width) {
  if (!row.IsSequence() || row.size() != width)
    throw InputError(fmt::format("{}: each entry of '{}' must be a list of {} numbers, got {}", yaml::where(origin, row),
                                 what, width, yaml::describe(row)));
  std::vector<double> out;
  for (const YAML::Node& cell : row) {
    std::optional<double> v = cell.IsScalar() ? yaml::parse_strict_double(cell.Scalar()) : std::nullopt;
    if (!v) throw InputError(fmt::format("{}: '{}' holds {}, not a number", yaml::where(origin, cell), what, yaml::describe(cell)));
    out.push_back(*v);
  }
  return out;
}

std::optional<Collective> parse_collective(const std::string& s) {
  for (Collective c : {Collective::all_gather, Collective::reduce_scatter, Collective::all_reduce, Collective::all_to_all,
                       Collective::send_recv})
    if (s == to_string(c)) return c;
  return std::nullopt;
}

std::optional<DType> parse_profile_dtype(const std::string& s) {
  if (s == "fp32") return DType::fp32;
  if (s == "bf16") return DType::bf16;
  return std::nullopt;
}

CollectiveCalibration read_collective_calibration(const YAML::Node& node, const std::string& origin, std::size_t i) {
  const std::string prefix = fmt::format("collectives[{}].", i);
  if (!node.IsMap())
    throw InputError(fmt::format("{}: 'collectives' entries must be mappings, got {}", yaml::where(origin, node),
                                 yaml::describe(node)));
  yaml::MapReader r(node, origin, "collective", prefix);
  r.check_keys({"op", "scope", "ranks", "ranks_per_node", "min_bytes", "max_bytes", "rms_error_pct", "max_error_pct",
                "fit", "points"});
  CollectiveCalibration e;
  e.op = r.choice("op", parse_collective, "all_gather, reduce_scatter, all_reduce, all_to_all, send_recv");
  e.ranks = r.integer("ranks", Bound::positive);
  e.ranks_per_node = r.integer("ranks_per_node", Bound::positive);
  if (e.ranks < 2 || e.ranks_per_node > e.ranks)
    throw InputError(fmt::format("{}: '{}ranks' must be ≥ 2 and ≥ ranks_per_node", r.where("ranks"), prefix));
  const YAML::Node fit = node["fit"];
  if (!fit || !fit.IsSequence() || fit.size() == 0)
    throw InputError(fmt::format("{}: '{}fit' must be a list of one or more segments", r.where("fit"), prefix));
  for (std::size_t j = 0; j < fit.size(); ++j) {
    if (!fit[j].IsMap())
      throw InputError(fmt::format("{}: '{}fit' entries must be mappings", yaml::where(origin, fit[j]), prefix));
    yaml::MapReader sr(fit[j], origin, "fit segment", fmt::format("{}fit[{}].", prefix, j));
    sr.check_keys({"from_bytes", "to_bytes", "alpha_s", "beta_s_per_byte"});
    CollectiveFitSegment seg;
    seg.from_bytes = sr.number("from_bytes", Bound::positive);
    seg.to_bytes = sr.number("to_bytes", Bound::positive);
    seg.alpha_s = sr.number("alpha_s", Bound::non_negative);
    seg.beta_s_per_byte = sr.number("beta_s_per_byte", Bound::non_negative);
    // Fits may put a term at 0, but not beyond physics: a fixed cost over a minute, or a per-byte time under
    // 1e-15 s (1 PB/s) is a unit slip or a broken measurement, and would make every prediction from it wrong.
    if (seg.alpha_s > 60)
      throw InputError(fmt::format("{}: '{}fit[{}].alpha_s' = {} s is implausible (at most 60 s); check the unit (seconds)",
                                   sr.where("alpha_s"), prefix, j, seg.alpha_s));
    if (seg.beta_s_per_byte > 0 && seg.beta_s_per_byte < 1e-15)
      throw InputError(fmt::format("{}: '{}fit[{}].beta_s_per_byte' = {} is faster than 1 PB/s; check the unit (s/byte)",
                                   sr.where("beta_s_per_byte"), prefix, j, seg.beta_s_per_byte));
    e.fit.push_back(seg);
  }
  const YAML::Node points = node["points"];
  if (!points || !points.IsSequence())
    throw InputError(fmt::format("{}: '{}points' must be a list of [bytes, median_s, ...] rows", r.where("points"), prefix));
  for (const YAML::Node& row : points) {
    const std::vector<double> v = read_row(row, origin, prefix + "points", 8);
    if (!(v[0] > 0) || !(v[1] > 0) || (!e.bytes.empty() && v[0] <= e.bytes.back()))
      throw InputError(fmt::format("{}: '{}points' need positive sizes and times, sizes ascending",
                                   yaml::where(origin, row), prefix));
    // No collective between processes takes under 100 ns or moves more than 1 PB/s; none should take an hour.
    if (v[1] < 1e-7 || v[1] > 3600 || v[0] / v[1] > 1e15)
      throw InputError(fmt::format("{}: '{}points' row [{}, {}]: {} s for {} bytes is not a plausible measurement "
                                   "(100 ns to 1 h, at most 1 PB/s)",
                                   yaml::where(origin, row), prefix, v[0], v[1], v[1], v[0]));
    e.bytes.push_back(v[0]);
    e.seconds.push_back(v[1]);
  }
  return e;
}

ClusterSpec read_profile(const std::string& text, const std::string& origin, const PresetStore& store) {
  yaml::MapReader r(yaml::load_document(text, origin), origin, "profile");
  r.check_keys({"kind", "version", "name", "base_cluster", "gpus_per_node", "meta", "hardware", "collectives", "gemm"});
  if (r.integer("version", Bound::positive) != 1)
    throw InputError(fmt::format("{}: 'version' {} is not known (this shardplan reads version 1 profiles)",
                                 r.where("version"), r.integer("version", Bound::positive)));
  const std::string base = r.string("base_cluster");
  if (store.find(PresetKind::cluster, base) == nullptr)
    throw InputError(fmt::format("{}: 'base_cluster': {}", r.where("base_cluster"),
                                 unknown_preset_message(PresetKind::cluster, base, store.names(PresetKind::cluster))));
  ClusterSpec c = store.cluster(base);
  c.name = r.string("name");
  c.description = fmt::format("calibrated profile {} (measured on top of the {} preset)", origin, base);
  c.source = origin;
  c.gpus_per_node = r.integer("gpus_per_node", Bound::positive);

  const yaml::MapReader hw = r.map("hardware");
  hw.check_keys({"device", "dtype", "peak_tflops", "copy_gbps", "elementwise_gbps", "wrong"});
  auto gemm = std::make_shared<GemmCalibration>();
  gemm->cpu = hw.string("device") == "cpu";
  c.gpu.cpu_ranks = gemm->cpu;
  // Measured on CPU ranks: say so wherever the device is named ("2 × cpu-rank", not "2 × a800-80g").
  if (gemm->cpu) c.gpu.name = "cpu-rank", c.gpu.description = "a CPU process (calibrated on CPU ranks)";
  gemm->dtype = hw.choice("dtype", parse_profile_dtype, "fp32, bf16");
  gemm->peak_flops_per_s = hw.number_or("peak_tflops", 0, Bound::non_negative) * 1e12;
  gemm->memory_bytes_per_s = hw.number_or("copy_gbps", 0, Bound::non_negative) * 1e9;
  gemm->elementwise_bytes_per_s = hw.number_or("elementwise_gbps", 0, Bound::non_negative) * 1e9;
  if (gemm->elementwise_bytes_per_s > 1e14)
    throw InputError(fmt::format("{}: 'hardware': elementwise_gbps ≤ 100000 (got {}); check the units (GB/s)",
                                 hw.where("elementwise_gbps"), gemm->elementwise_bytes_per_s / 1e9));
  // The same ceilings as a GPU preset (validate_gpu): 100000 TFLOP/s, 100000 GB/s.
  if (gemm->peak_flops_per_s > 1e17 || gemm->memory_bytes_per_s > 1e14)
    throw InputError(fmt::format("{}: 'hardware': peak_tflops ≤ 100000 and copy_gbps ≤ 100000 (got {} and {}); check "
                                 "the units (TFLOP/s, GB/s)",
                                 hw.where("peak_tflops"), gemm->peak_flops_per_s / 1e12, gemm->memory_bytes_per_s / 1e9));

  auto comm = std::make_shared<CommCalibration>();
  comm->origin = origin;
  const YAML::Node collectives = r.node()["collectives"];
  if (collectives && !collectives.IsSequence())
    throw InputError(fmt::format("{}: 'collectives' must be a list", r.where("collectives")));
  if (collectives)
    for (std::size_t i = 0; i < collectives.size(); ++i)
      comm->collectives.push_back(read_collective_calibration(collectives[i], origin, i));

  if (r.has("gemm")) {
    const yaml::MapReader g = r.map("gemm");
    g.check_keys({"dtype", "table"});
    const YAML::Node table = g.node()["table"];
    if (!table || !table.IsSequence())
      throw InputError(fmt::format("{}: 'gemm.table' must be a list of [m, n, k, median_s, ...] rows", g.where("table")));
    for (const YAML::Node& row : table) {
      const std::vector<double> v = read_row(row, origin, "gemm.table", 8);
      if (!(v[0] >= 1 && v[1] >= 1 && v[2] >= 1 && v[3] > 0))
        throw InputError(fmt::format("{}: 'gemm.table' needs m, n, k ≥ 1 and a positive time", yaml::where(origin, row)));
      // Shapes beyond 2^40 would overflow as integers; over 10 PFLOP/s per device (10× any GPU) is a unit slip.
      if (v[0] > 1099511627776.0 || v[1] > 1099511627776.0 || v[2] > 1099511627776.0 ||
          2.0 * v[0] * v[1] * v[2] / v[3] > 1e16)
        throw InputError(fmt::format("{}: 'gemm.table' row m={} n={} k={} in {} s is not a plausible measurement "
                                     "(shapes up to 2^40, at most 10 PFLOP/s)",
                                     yaml::where(origin, row), v[0], v[1], v[2], v[3]));
      GemmCalibrationPoint p;
      p.m = static_cast<int64_t>(v[0]);
      p.n = static_cast<int64_t>(v[1]);
      p.k = static_cast<int64_t>(v[2]);
      p.flops_per_s = 2.0 * v[0] * v[1] * v[2] / v[3];
      gemm->points.push_back(p);
    }
  }
  if (!gemm->points.empty() || gemm->memory_bytes_per_s > 0) c.gpu.gemm_calibration = gemm;
  if (!comm->collectives.empty()) c.comm_calibration = comm;
  validate_in_file(r, [&] { validate_cluster(c); });
  return c;
}

// ---- names --------------------------------------------------------------------------------------------------

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// How to name something that is not a shipped preset, per kind.
const char* alternative_for(PresetKind kind) {
  switch (kind) {
    case PresetKind::model: return "or give --model FILE.yaml";
    case PresetKind::gpu: return "or add DIR/gpus/NAME.yaml with --presets-dir DIR";
    case PresetKind::cluster: return "or give --cluster FILE.yaml";
  }
  return "";
}

std::string unknown_preset_message(PresetKind kind, const std::string& name, const std::vector<std::string>& known) {
  std::string hint;
  std::vector<std::string> near = near_names(name, known);
  if (!near.empty()) hint = fmt::format("did you mean '{}'? ", fmt::join(near, "', '"));
  std::string listed = known.empty() ? std::string("none") : fmt::format("{}", fmt::join(known, ", "));
  return fmt::format("unknown {} preset '{}' ({}known: {}; {})", to_string(kind), yaml::printable(name), hint, listed,
                     alternative_for(kind));
}

// A --cluster value that is a file rather than a preset name.
bool looks_like_file(const std::string& s) {
  auto ends_with = [&](std::string_view suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends_with(".yaml") || ends_with(".yml") || s.find('/') != std::string::npos;
}

// The *.yaml files of one folder, sorted so that the order of additions does not depend on the file system.
std::vector<fs::path> yaml_files_in(const fs::path& folder) {
  std::vector<fs::path> files;
  for (const auto& item : fs::directory_iterator(folder)) {
    const fs::path& p = item.path();
    bool hidden = p.filename().string().rfind('.', 0) == 0;  // editor back-ups and the like
    if (!hidden && p.extension() == ".yml" && !item.is_directory())  // would be skipped without a word
      throw InputError(fmt::format("{}: preset files end in .yaml; rename it to {}.yaml", p.string(), p.stem().string()));
    if (!hidden && p.extension() == ".yaml" && !item.is_directory()) files.push_back(p);
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

// ---- public parsing -----------------------------------------------------------------------------------------

ModelSpec parse_model_yaml(const std::string& text, const std::string& origin) {
  return read_model(text, origin, nullptr);
}

GpuSpec parse_gpu_yaml(const std::string& text, const std::string& origin) {
  return read_gpu(text, origin, nullptr);
}

ClusterSpec parse_cluster_yaml(const std::string& text, const std::string& origin, const PresetStore& store) {
  return read_cluster(text, origin, nullptr, store);
}

ClusterSpec parse_profile_yaml(const std::string& text, const std::string& origin, const PresetStore& store) {
  return read_profile(text, origin, store);
}

std::vector<std::string> near_names(const std::string& wanted, const std::vector<std::string>& known,
                                    std::size_t limit) {
  const std::string w = lower(wanted);
  const std::size_t max_distance = std::max<std::size_t>(2, w.size() / 3);
  std::vector<std::pair<std::size_t, std::string>> scored;
  for (const std::string& name : known) {
    const std::string n = lower(name);
    std::size_t d = edit_distance(w, n);
    // A fragment ("llama3" for "llama3-8b") is also a near name, ranked after close misspellings.
    bool fragment = w.size() >= 3 && n.find(w) != std::string::npos;
    if (d <= max_distance || fragment) scored.emplace_back(d, name);
  }
  std::sort(scored.begin(), scored.end());
  std::vector<std::string> result;
  for (std::size_t i = 0; i < scored.size() && i < limit; ++i) result.push_back(scored[i].second);
  return result;
}

// ---- the store ----------------------------------------------------------------------------------------------

PresetStore PresetStore::builtin() {
  PresetStore store;
  for (const embedded::EmbeddedPreset& preset : embedded::presets()) {
    PresetEntry entry;
    entry.kind = kind_from_string(preset.kind);
    entry.name = std::string(preset.name);
    entry.origin = std::string(preset.origin);
    entry.text = std::string(preset.text);
    entry.embedded = true;
    store.add(std::move(entry));
  }
  return store;
}

void PresetStore::add_directory(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw InputError(fmt::format("--presets-dir {}: {}", dir, fs::exists(dir, ec) ? "not a folder" : "no such folder"));
  }
  bool has_kind_folder = false;
  std::size_t total = 0;  // bytes of every preset file: the folder is bounded as one file is
  try {
    for (PresetKind kind : kAllKinds) {
      fs::path folder = fs::path(dir) / folder_of(kind);
      if (!fs::is_directory(folder, ec)) continue;
      has_kind_folder = true;
      for (const fs::path& file : yaml_files_in(folder)) {
        PresetEntry entry;
        entry.kind = kind;
        entry.name = file.stem().string();
        entry.origin = file.string();
        // Regular files only: a FIFO named x.yaml would otherwise be read on every command (issue 19, item 7).
        const std::string why = io::read_file_bounded(file.string(), entry.text, kMaxInputBytes, true);
        if (!why.empty())
          throw InputError(fmt::format("--presets-dir {}: cannot read {}: {}; preset files are regular YAML files",
                                       dir, file.string(), why));
        if ((total += entry.text.size()) > kMaxInputBytes)
          throw InputError(fmt::format("--presets-dir {}: its preset files hold more than {} MiB; no preset folder is "
                                       "that large (is it the right folder?)",
                                       dir, kMaxInputBytes >> 20));
        add(std::move(entry));
      }
    }
  } catch (const fs::filesystem_error& e) {
    throw InputError(fmt::format("--presets-dir {}: cannot read {}: {}", dir, e.path1().string(), e.code().message()));
  }
  // Pointing at a folder of YAML files (rather than one with models/ etc.) would otherwise add nothing, silently.
  if (!has_kind_folder) {
    throw InputError(fmt::format("--presets-dir {}: has none of the folders models/, gpus/, clusters/ (put a model "
                                 "preset in {}/models/NAME.yaml)",
                                 dir, dir));
  }
}

void PresetStore::add(PresetEntry entry) {
  auto& presets = entries_[index_of(entry.kind)];
  auto existing = presets.find(entry.name);
  if (existing != presets.end()) entry.replaces = existing->second.origin;
  std::string name = entry.name;
  presets.insert_or_assign(std::move(name), std::move(entry));
}

std::vector<std::string> PresetStore::names(PresetKind kind) const {
  std::vector<std::string> result;
  for (const auto& [name, entry] : entries_[index_of(kind)]) result.push_back(name);
  return result;  // std::map keeps them sorted
}

const PresetEntry* PresetStore::find(PresetKind kind, const std::string& name) const {
  const auto& presets = entries_[index_of(kind)];
  auto it = presets.find(name);
  return it == presets.end() ? nullptr : &it->second;
}

namespace {

const PresetEntry& find_or_throw(const PresetStore& store, PresetKind kind, const std::string& name) {
  const PresetEntry* entry = store.find(kind, name);
  if (entry == nullptr) throw InputError(unknown_preset_message(kind, name, store.names(kind)));
  return *entry;
}

}  // namespace

ModelSpec PresetStore::model(const std::string& name) const {
  const PresetEntry& entry = find_or_throw(*this, PresetKind::model, name);
  return read_model(entry.text, entry.origin, &entry.name);
}

GpuSpec PresetStore::gpu(const std::string& name) const {
  const PresetEntry& entry = find_or_throw(*this, PresetKind::gpu, name);
  return read_gpu(entry.text, entry.origin, &entry.name);
}

ClusterSpec PresetStore::cluster(const std::string& name_or_file) const {
  if (looks_like_file(name_or_file)) {
    const std::string text = read_text_file(name_or_file);
    // A calibration profile (kind: calibration-profile) or a plain cluster YAML.
    if (is_profile(yaml::load_document(text, name_or_file))) return read_profile(text, name_or_file, *this);
    return read_cluster(text, name_or_file, nullptr, *this);
  }
  const PresetEntry& entry = find_or_throw(*this, PresetKind::cluster, name_or_file);
  return read_cluster(entry.text, entry.origin, &entry.name, *this);
}

ModelSpec PresetStore::model_file(const std::string& path) const {
  return read_model(read_text_file(path), path, nullptr);
}

}  // namespace shardplan
