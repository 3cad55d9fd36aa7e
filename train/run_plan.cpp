#include "train/run_plan.h"

#include "train/run_setup.h"

namespace gpt2 {

RunPlan plan_training_run(const TrainOptions& o, int world, TrainLogger& log) {
  RunPlan p;
  p.opts = o;  // with --init-from resolved: the run loads weights only from it, exactly like --model FILE|HF_DIR
  if (!o.init_from.empty()) p.opts.model = resolve_init_from(o.init_from);
  p.cfg = requested_config(p.opts, &p.cfg_from_file);
  p.layout = ParamLayout::for_config(p.cfg);
  p.has_resume_state = peek_resume_state(p.opts, &p.resume_state, &p.resume_state_path);
  return p.at_world(world, log);
}

RunPlan RunPlan::at_world(int w, TrainLogger& log) const {
  RunPlan p = *this;
  p.world = w;
  p.shape = batch_shape(p.opts, p.cfg, w, p.has_resume_state ? &p.resume_state : nullptr, p.resume_state_path, log);
  return p;
}

RunAssembly::RunAssembly(Backend& backend, Communicator& buffers, const RunPlan& plan)
    : dp(backend, buffers, plan.layout, plan.opts.zero_stage),
      model(backend, plan.cfg, plan.shape.B, plan.shape.T, dp.grad_mode(), dp.param_capacity(), plan.opts.recompute),
      optimizer(backend, plan.layout, dp.opt_begin(), dp.opt_end()) {
  optimizer.reserve_master(model.params());
  model.reserve_deferred_losses(plan.shape.grad_accum);
}

}  // namespace gpt2
