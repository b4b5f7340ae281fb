// Megatron-Core's layout string, read as megatron/core/transformer/pipeline_parallel_layer_layout.py reads it:
// parse_str_to_list (commas dropped, "(...)*n" unrolled, then "x*n"; stages split at '|') and the structural checks of
// validate_layer_layout (one E first, one L last, the MTP layers after every block and together in one stage).
#include "planner/megatron_layout.hpp"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

namespace shardplan {

namespace {

constexpr size_t kMaxExpanded = 1 << 20;  // symbols after unrolling: far beyond any model, short of memory trouble

// The repeat count after '*' at text[i]; advances i past it. 0 when no digits follow.
int64_t read_repeat(const std::string& text, size_t& i) {
  int64_t n = 0;
  size_t j = i;
  while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j])) && n <= int64_t{kMaxExpanded})
    n = n * 10 + (text[j++] - '0');
  while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;  // too long: n is already over
  i = j;
  return n;
}

// "(ab|)*2" → "ab|ab|" (Megatron's first pattern, \(([^)]+)\)\*(\d+), which does not nest).
bool unroll_groups(const std::string& in, std::string& out, std::string& error) {
  for (size_t i = 0; i < in.size();) {
    if (in[i] == ')') return error = "a ')' without its '('", false;
    if (in[i] != '(') {
      out += in[i++];
      continue;
    }
    const size_t close = in.find(')', i);
    if (close == std::string::npos) return error = "a '(' without its ')'", false;
    const std::string body = in.substr(i + 1, close - i - 1);
    if (body.empty()) return error = "an empty group '()'", false;
    if (body.find('(') != std::string::npos) return error = "groups do not nest (Megatron unrolls one level)", false;
    size_t j = close + 1;
    if (j >= in.size() || in[j] != '*') return error = fmt::format("the group '({})' needs a repeat count '*n'", body), false;
    ++j;
    const int64_t n = read_repeat(in, j);
    if (n < 1) return error = fmt::format("the group '({})' needs a repeat count of at least 1", body), false;
    if (static_cast<size_t>(n) * body.size() + out.size() > kMaxExpanded)
      return error = "it unrolls to more than a million symbols", false;
    for (int64_t k = 0; k < n; ++k) out += body;
    i = j;
  }
  return true;
}

// "t*4" → "tttt" (Megatron's second pattern, (.)\*(\d+)).
bool unroll_symbols(const std::string& in, std::string& out, std::string& error) {
  for (size_t i = 0; i < in.size();) {
    if (in[i] == '*') return error = "a '*n' with nothing before it to repeat", false;
    const char c = in[i++];
    if (i < in.size() && in[i] == '*') {
      ++i;
      const int64_t n = read_repeat(in, i);
      if (n < 1) return error = fmt::format("'{}*' needs a repeat count of at least 1", c), false;
      if (static_cast<size_t>(n) + out.size() > kMaxExpanded) return error = "it unrolls to more than a million symbols", false;
      out.append(static_cast<size_t>(n), c);
    } else {
      out += c;
    }
  }
  return true;
}

std::string checked_structure(const std::vector<std::string>& stages, StageLayout& layout) {
  if (stages.size() > static_cast<size_t>(kMaxLayoutStages))
    return fmt::format("{} virtual stages; shardplan takes at most {}", stages.size(), kMaxLayoutStages);
  int64_t embeddings = 0, losses = 0, blocks_after_mtp = 0;
  bool mtp_seen = false;
  layout.stages = static_cast<int16_t>(stages.size());
  for (size_t k = 0; k < stages.size(); ++k) {
    int64_t blocks = 0, mtp = 0;
    for (const char c : stages[k]) {
      switch (c) {
        case 'E': ++embeddings; break;
        case 'L': ++losses; break;
        case 't':
          ++blocks;
          if (mtp_seen) ++blocks_after_mtp;
          break;
        case 'm':
          ++mtp;
          mtp_seen = true;
          break;
        default:
          return fmt::format("'{}' is not a layer symbol (E embedding, t transformer block, m MTP layer, L loss; '|' "
                             "between stages)",
                             c);
      }
    }
    if (blocks > 32767) return fmt::format("virtual stage {} has {} blocks; at most 32767", k, blocks);
    layout.blocks[k] = static_cast<int16_t>(blocks);
    if (mtp > 0) {
      // validate_layer_layout: "All of the MTP layers must be in the same one virtual pipeline stage".
      if (layout.mtp_stage >= 0) return "the MTP layers (m) must all be in one virtual stage";
      layout.mtp_stage = static_cast<int16_t>(k);
      layout.mtp_layers = static_cast<int16_t>(std::min<int64_t>(mtp, 32767));
    }
  }
  // validate_layer_layout: the first layer must be the embedding and the last the loss, each exactly once. shardplan
  // places them on the first and last virtual stage (an empty stage before E or after L is not one it prices).
  if (embeddings != 1 || losses != 1) return "the layout needs exactly one E (embedding) and one L (loss)";
  if (stages.front().empty() || stages.front().front() != 'E')
    return "the embedding must open the first virtual stage: start the layout with 'E'";
  if (stages.back().empty() || stages.back().back() != 'L') return "the loss must close the last virtual stage: end the layout with 'L'";
  if (blocks_after_mtp > 0) return "decoder layers must be placed before MTP layers (every t before the first m)";
  return "";
}

}  // namespace

LayoutParse parse_megatron_layout(const std::string& text) {
  LayoutParse out;
  std::string plain;
  for (const char c : text)
    if (c != ',') plain += c;  // "purely cosmetic commas"
  if (plain.empty()) {
    out.error = "the layout is empty (e.g. 'Et*4|(t*4|)*14,tmL')";
    return out;
  }
  std::string grouped, symbols;
  if (!unroll_groups(plain, grouped, out.error) || !unroll_symbols(grouped, symbols, out.error)) return out;
  std::vector<std::string> stages(1);
  for (const char c : symbols) {
    if (c == '|') stages.emplace_back();
    else stages.back() += c;
  }
  out.error = checked_structure(stages, out.layout);
  return out;
}

std::string format_megatron_layout(const std::vector<int64_t>& blocks, int64_t mtp_layers) {
  const size_t stages = blocks.size();
  auto stage_text = [&](size_t k) {
    std::string t = k == 0 ? "E" : "";
    if (blocks[k] == 1) t += "t";
    else if (blocks[k] > 1) t += fmt::format("t*{}", blocks[k]);
    if (k + 1 == stages) t += std::string(static_cast<size_t>(std::max<int64_t>(mtp_layers, 0)), 'm') + "L";
    return t;
  };
  std::string out;
  for (size_t k = 0; k < stages;) {
    size_t run = 1;
    // Middle stages only: the first holds E and the last L, so neither equals a neighbour.
    while (k > 0 && k + run + 1 < stages && blocks[k + run] == blocks[k]) ++run;
    if (run > 1) out += fmt::format("({}|)*{}", stage_text(k), run);
    else out += stage_text(k) + (k + 1 < stages ? "|" : "");
    if (run > 1 && k + run + 1 == stages) out += ",";  // "(t*4|)*14,tmL": the comma only for the eye
    k += run;
  }
  return out;
}

}  // namespace shardplan
