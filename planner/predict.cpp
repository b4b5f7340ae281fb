#include "planner/predict.hpp"

#include <fmt/format.h>

#include "planner/error.hpp"
#include "planner/moe.hpp"

#include "planner/compute_cost.hpp"
#include "planner/precision.hpp"

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
  const double peak = p.memory.peak_stage().peak.total();
  if (!(peak <= kMaxPlausibleBytes))
    throw InputError(fmt::format("this configuration needs {:.3g} bytes per GPU, beyond any machine; check --seq, "
                                 "--micro-batch and the model's sizes",
                                 peak));
  p.flops = step_flops(m, s);
  p.time = estimate_step_time(m, s, c);
  p.throughput = throughput_of(p.flops, p.time, s, c.gpu);
  if (p.time.modelled) p.band = error_band(s.framework, c.gpu, p.time.step_s, model_is_moe(m), s.cp > 1);
  return p;
}

Throughput throughput_of(const StepFlops& f, const StepTime& t, const Strategy& s, const GpuSpec& g) {
  Throughput out;
  if (!t.modelled || t.step_s <= 0) return out;
  const double gpus = static_cast<double>(s.gpus);
  out.tokens_per_s = f.tokens / t.step_s;
  out.tokens_per_s_per_gpu = out.tokens_per_s / gpus;
  out.model_tflops_per_gpu = f.model_flops / t.step_s / gpus / 1e12;
  out.hardware_tflops_per_gpu = f.hardware_flops / t.step_s / gpus / 1e12;
  // CPU ranks (a calibration profile measured on CPUs): the measured GEMM peak is the device's peak, not the base
  // preset GPU's (a CPU profile over a800x8 reported an A800 MFU).
  const double peak_tflops = g.cpu_ranks && g.gemm_calibration && g.gemm_calibration->peak_flops_per_s > 0
                                 ? g.gemm_calibration->peak_flops_per_s / 1e12
                                 : peak_flops(g, precision_compute_dtype(s.precision)) / 1e12;
  out.mfu = out.model_tflops_per_gpu / peak_tflops;
  out.hfu = out.hardware_tflops_per_gpu / peak_tflops;
  return out;
}

}  // namespace shardplan
