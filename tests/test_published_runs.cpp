// The public validation set: accuracy the model holds today, pinned so that a regression is caught
// (reports/accuracy.md has the full table).
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>

#include "bench/published_runs.hpp"

using namespace shardplan;
using namespace shardplan::validation;

namespace {

struct Scored {
  const PublishedRun* run;
  double error;  // (predicted − measured) / measured
};

std::vector<Scored> score(const PublishedRuns& runs) {
  std::vector<Scored> out;
  for (const PublishedRun& r : runs.runs) {
    const Prediction p = predict(r.model, r.strategy, r.cluster);
    out.push_back({&r, (predicted_metric(r, p) - r.measured) / r.measured});
  }
  return out;
}

bool megatron_row(const PublishedRun& r) { return r.strategy.framework == Framework::megatron; }

}  // namespace

TEST_SUITE("published runs") {
  TEST_CASE("predictions of the published runs stay within the accuracy reports/accuracy.md states") {
    const std::string csv = default_csv_path();
    if (!std::filesystem::exists(csv)) {
      MESSAGE("validation set not found at " << csv << "; skipped");
      return;
    }
    const PublishedRuns runs = load_published_runs(csv, PresetStore::builtin());
    REQUIRE(runs.runs.size() >= 40);
    const std::vector<Scored> scored = score(runs);
    double megatron_sum = 0;
    int megatron_rows = 0;
    for (const Scored& s : scored) {
      CAPTURE(s.run->source);
      CAPTURE(s.run->label);
      CAPTURE(s.error);
      if (megatron_row(*s.run)) {
        // Megatron (N21, K22, MLM20): every row within 12 %.
        CHECK(std::fabs(s.error) <= 0.12);
        megatron_sum += std::fabs(s.error);
        ++megatron_rows;
      } else if (s.run->strategy.framework == Framework::fsdp) {
        // PyTorch FSDP (torchtitan, MosaicML): over-predicted, by at most 25 %.
        CHECK(s.error >= -0.05);
        CHECK(s.error <= 0.25);
      }
    }
    REQUIRE(megatron_rows >= 25);
    CHECK(megatron_sum / megatron_rows <= 0.07);
  }

  TEST_CASE("a row gets the preset with its architecture and, among those, its vocabulary") {
    const std::string csv = default_csv_path();
    if (!std::filesystem::exists(csv)) return;
    const PublishedRuns runs = load_published_runs(csv, PresetStore::builtin());
    // torchtitan's Llama 3 70B and Llama 2 70B rows share every block dimension; the CSV's vocab column (128256
    // against 32000) tells them apart. GPT-3's 51200 (padded) matches no preset exactly: its architecture does.
    int llama70 = 0, gpt3 = 0;
    for (const PublishedRun& r : runs.runs) {
      CAPTURE(r.label);
      if (r.source == "TTA" && r.model.layers == 80) {
        ++llama70;
        CHECK(r.model.name == (r.label == "Llama3 70B" ? "llama3-70b" : "llama2-70b"));
        CHECK(r.model.vocab == (r.label == "Llama3 70B" ? 128256 : 32000));
      }
      if (r.label == "GPT-3") {
        ++gpt3;
        CHECK(r.model.name == "gpt3-175b");
      }
    }
    CHECK(llama70 == 2);
    CHECK(gpt3 >= 5);
  }

  TEST_CASE("K22's full-recomputation iterations within 5 %") {
    const std::string csv = default_csv_path();
    if (!std::filesystem::exists(csv)) return;
    const PublishedRuns runs = load_published_runs(csv, PresetStore::builtin());
    int checked = 0;
    for (const Scored& s : score(runs))
      if (s.run->source == "K22-Tab5" && s.run->strategy.recompute == Recompute::full) {
        CAPTURE(s.run->label);
        CHECK(std::fabs(s.error) <= 0.05);
        ++checked;
      }
    CHECK(checked == 4);
  }
}
