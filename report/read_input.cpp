// The document a report renders, read without trusting it (report.hpp read_json_file): bounded in bytes (64 MiB),
// in parsed size (io/json_checked.hpp, yaml::load_document's node budget: a YAML alias bomb is refused before it is
// expanded), with no repeated keys, and with numbers a report can print (check_document_numbers).
#include <cmath>
#include <filesystem>
#include <iostream>
#include <new>
#include <set>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "io/input_file.hpp"
#include "io/json_checked.hpp"
#include "io/preset_store.hpp"
#include "io/yaml_fields.hpp"
#include "planner/error.hpp"
#include "report/parts.hpp"
#include "report/report.hpp"

namespace shardplan::report {

namespace {

// YAML as JSON: maps, sequences, and scalars as numbers or booleans unless quoted. The tree was counted with its
// aliases expanded before it was built (at most yaml::kMaxYamlNodes values), so this walk is bounded.
json yaml_to_json(const YAML::Node& n, const std::string& name) {
  switch (n.Type()) {
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& kv : n) {
        if (!kv.first.IsScalar())
          throw InputError(fmt::format("{}: keys must be words, got {}", yaml::where(name, kv.first),
                                       yaml::describe(kv.first)));
        const std::string& key = kv.first.Scalar();
        if (out.contains(key))
          throw InputError(fmt::format("{}: key '{}' appears twice; keep one", yaml::where(name, kv.first),
                                       yaml::printable(key)));
        out[key] = yaml_to_json(kv.second, name);
      }
      return out;
    }
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const auto& v : n) out.push_back(yaml_to_json(v, name));
      return out;
    }
    case YAML::NodeType::Scalar: {
      const std::string& v = n.Scalar();
      if (n.Tag() == "!") return v;  // quoted
      if (v == "true" || v == "false") return v == "true";
      if (v == "null" || v == "~") return nullptr;
      char* end = nullptr;
      const double d = std::strtod(v.c_str(), &end);
      if (!v.empty() && end == v.c_str() + v.size() && std::isfinite(d)) {
        if (v.find_first_of(".eE") == std::string::npos && std::abs(d) < 9e15) return static_cast<int64_t>(d);
        return d;
      }
      return v;
    }
    default: return nullptr;
  }
}

// The JSON library's message without its "[json.exception...] " tag.
std::string json_message(const std::exception& e) {
  std::string what = e.what();
  if (const auto at = what.find("parse error"); at != std::string::npos) return what.substr(at);
  if (const auto bracket = what.find("] "); bracket != std::string::npos) return what.substr(bracket + 2);
  return what;
}

bool ends_with(const std::string& s, const char* suffix) {
  const std::string_view x(suffix);
  return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
}

// Every number of the document, with the path that names it. `key` is the innermost object key above the value.
void check_numbers(const json& j, const std::string& path, const std::string& key, const std::string& origin) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) check_numbers(v, path.empty() ? k : path + "." + k, k, origin);
    return;
  }
  if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) check_numbers(j[i], fmt::format("{}[{}]", path, i), key, origin);
    return;
  }
  if (!j.is_number()) return;
  const double v = j.get<double>();
  // A byte count is a whole machine's at most (2^60, above the planner's 2^59 ceiling); any figure beyond 1e18 is
  // no measurement or prediction (a 309-digit "GB" figure printed "under the 80 % line" otherwise).
  const bool percent = path.find("_pct") != std::string::npos;  // error_pct.peak_bytes is a signed percentage
  // headroom_bytes = capacity − the bytes that decide the fit (planner/memory.hpp fit_bytes): negative for a
  // configuration that does not fit (cli/render_prediction.cpp).
  const double least = key == "headroom_bytes" ? -1152921504606846976.0 : 0.0;
  if (ends_with(key, "bytes") && !percent && !(v >= least && v <= 1152921504606846976.0))
    throw InputError(fmt::format("{}: field '{}' = {} is not a byte count between 0 and 2^60; the document was not "
                                 "written by shardplan, or was edited",
                                 origin, io::escape_for_line(path), v));
  // FLOP counts are the exception: a step of Llama 3 70B at 4 M tokens is 1.7e18 FLOPs, of a 10-trillion-parameter
  // model at 100 M tokens 6e21; 1e24 bounds them.
  const bool flops = key.find("flops") != std::string::npos || path.find("flops") != std::string::npos;
  const double most = flops ? 1e24 : 1e18;
  if (!(std::fabs(v) <= most))
    throw InputError(fmt::format("{}: field '{}' = {} is beyond any plausible figure (|x| ≤ {:g}); the document was "
                                 "not written by shardplan, or was edited",
                                 origin, io::escape_for_line(path), v, most));
}

}  // namespace

void check_document_numbers(const json& doc, const std::string& origin) { check_numbers(doc, "", "", origin); }

json read_json_file(const std::string& path) {
  std::string text;
  const std::string name = path == "-" ? "standard input" : io::escape_for_line(path);
  // At most kMaxInputBytes (io/preset_store.hpp): `report /dev/zero` is refused, not read until memory runs out.
  if (path == "-") {
    if (!read_bounded(std::cin, text))
      throw InputError(fmt::format("{}: cannot read (larger than {} MiB; is it the right file?)", name, kMaxInputBytes >> 20));
  } else {
    const std::string why = io::read_file_bounded(path, text, kMaxInputBytes);
    if (why.rfind("larger than", 0) == 0)
      throw InputError(fmt::format("{}: cannot read (larger than {} MiB; is it the right file?)", name, kMaxInputBytes >> 20));
    if (why == "it is a folder, not a file") throw InputError(fmt::format("{}: is a directory, not a JSON file", name));
    if (!why.empty()) throw InputError(fmt::format("{}: cannot read ({})", name, why));
  }
  std::string ext = std::filesystem::path(path).extension().string();
  if (ext == ".yaml" || ext == ".yml") {  // a calibration profile: the checked loader (bounded, one document)
    try {
      yaml::check_yaml_text(text, name);  // UTF-8, and the node budget before any tree is built
      return yaml_to_json(YAML::Load(text), name);
    } catch (const YAML::Exception& e) {
      throw InputError(fmt::format("{}: not valid YAML: line {}, column {}: {}", name, e.mark.line + 1,
                                   e.mark.column + 1, yaml::printable(e.msg)));
    } catch (const std::bad_alloc&) {
      throw std::runtime_error(fmt::format("{}: out of memory while reading it", name));
    }
  }
  try {
    return io::parse_json_checked(text);
  } catch (const io::JsonLimitError& e) {
    throw InputError(fmt::format("{}: not a usable JSON document: {}", name, e.what()));
  } catch (const json::exception& e) {  // parse errors; out_of_range.406: "number overflow parsing '1e400'"
    throw InputError(fmt::format("{}: not valid JSON: {}", name, json_message(e)));
  } catch (const std::bad_alloc&) {
    throw std::runtime_error(fmt::format("{}: out of memory while reading its {} bytes of JSON", name, text.size()));
  }
}

}  // namespace shardplan::report
