#pragma once
// The preset YAML files compiled into the binary. The definition is generated at build time by
// cmake/embed_presets.cmake from presets/{models,gpus,clusters}/*.yaml.
#include <span>
#include <string_view>

namespace shardplan::embedded {

struct EmbeddedPreset {
  std::string_view kind;    // "model", "gpu", "cluster"
  std::string_view name;    // the file name without .yaml
  std::string_view origin;  // "presets/models/8b.yaml"
  std::string_view text;    // the file's contents, byte for byte
};

// Sorted by origin.
std::span<const EmbeddedPreset> presets();

}  // namespace shardplan::embedded
