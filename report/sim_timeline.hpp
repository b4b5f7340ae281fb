#pragma once
// The simulator's played step (sim/simulate.hpp) as a report Timeline: one lane per stream that ran ops, every op
// a span coloured by what it does, and allocated memory over the step per pipeline stage when the simulation
// recorded it (simulate(..., record_timeline = true)). Built only when the simulator is (SHARDPLAN_REPORT_SIM).
#include "report/charts.hpp"
#include "sim/simulate.hpp"

namespace shardplan::report {

Timeline timeline_from_simulation(const sim::SimResult& r);

}  // namespace shardplan::report
