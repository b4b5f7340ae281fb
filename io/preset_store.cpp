#include "io/preset_store.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>

#include "io/embedded_presets.hpp"
#include "io/input_file.hpp"
#include "io/preset_detail.hpp"
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

}  // namespace

namespace preset_detail {

void validate_in_file(const yaml::MapReader& r, const std::function<void()>& validate) {
  try {
    validate();
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: {}", locate_message(r, e.what()), e.what()));
  }
}

}  // namespace preset_detail

namespace {

using preset_detail::validate_in_file;

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
  m.mlp = r.choice("mlp", parse_mlp, "gelu, swiglu, squared-relu");
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
                "host_link_gbps", "tdp_w", "power_limit_w", "full_clock_power_w"});
  GpuSpec g;
  g.name = read_name(r, file_stem);
  g.description = r.string_or("description", "");
  g.source = r.string_or("source", "");
  g.architecture = r.choice_or("architecture", GpuArchitecture::unknown, parse_gpu_architecture,
                               "volta, ampere, ada, hopper, blackwell, blackwell-ultra, cdna3, cdna4");
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
  g.host_link_gbps = r.number_or("host_link_gbps", 0, Bound::positive);
  g.tdp_w = r.number_or("tdp_w", 0, Bound::positive);
  g.power_limit_w = r.number_or("power_limit_w", 0, Bound::positive);
  g.full_clock_power_w = r.number_or("full_clock_power_w", 0, Bound::positive);
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

using preset_detail::unknown_preset_message;

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

namespace preset_detail {

std::string unknown_preset_message(PresetKind kind, const std::string& name, const std::vector<std::string>& known) {
  std::string hint;
  std::vector<std::string> near = near_names(name, known);
  if (!near.empty()) hint = fmt::format("did you mean '{}'? ", fmt::join(near, "', '"));
  std::string listed = known.empty() ? std::string("none") : fmt::format("{}", fmt::join(known, ", "));
  return fmt::format("unknown {} preset '{}' ({}known: {}; {})", to_string(kind), yaml::printable(name), hint, listed,
                     alternative_for(kind));
}

}  // namespace preset_detail

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
  return preset_detail::read_profile(text, origin, store);
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
    if (preset_detail::is_profile(yaml::load_document(text, name_or_file)))
      return preset_detail::read_profile(text, name_or_file, *this);
    return read_cluster(text, name_or_file, nullptr, *this);
  }
  const PresetEntry& entry = find_or_throw(*this, PresetKind::cluster, name_or_file);
  return read_cluster(entry.text, entry.origin, &entry.name, *this);
}

ModelSpec PresetStore::model_file(const std::string& path) const {
  return read_model(read_text_file(path), path, nullptr);
}

}  // namespace shardplan
