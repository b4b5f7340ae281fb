#include "planner/predict.hpp"

namespace shardplan {

Prediction predict(const ModelSpec& m, const Strategy& s, const ClusterSpec& c) {
  validate_model(m);
  validate_cluster(c);
  validate_strategy(s, m, c);
  Prediction p;
  p.model = m;
  p.strategy = s;
  p.cluster = c;
  p.params = count_params(m);
  p.memory = estimate_memory(m, s, c);
  p.flops = step_flops(m, s);
  return p;
}

}  // namespace shardplan
