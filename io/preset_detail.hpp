#pragma once
// What preset_store.cpp and profile_yaml.cpp share, inside the io library only: the file-and-line wrapper of the
// planner's checks, the "unknown preset" message, and the calibration-profile reader (profile_yaml.cpp).
#include <functional>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "io/preset_store.hpp"
#include "io/yaml_fields.hpp"

namespace shardplan::preset_detail {

// Runs the planner's semantic checks (kv_heads divides heads, ...) and adds the file and line of the key the
// message names to the InputError it throws.
void validate_in_file(const yaml::MapReader& r, const std::function<void()>& validate);

// "unknown <kind> preset 'X' (did you mean ...? known: ...; <how to give a file>)".
std::string unknown_preset_message(PresetKind kind, const std::string& name, const std::vector<std::string>& known);

// A `shardplan calibrate` profile (kind: calibration-profile; schema in calibrate/README.md): its measured
// collectives, GEMMs and rates over the base cluster it names.
bool is_profile(const YAML::Node& doc);
ClusterSpec read_profile(const std::string& text, const std::string& origin, const PresetStore& store);

}  // namespace shardplan::preset_detail
