"""Stage 4, env -> run: check the configuration, launch the server, verify, measure, end the run.

    sglang_args   server argv; the static check (probe + model shape) and its summary
    model_shape   what sglang does not check before loading weights: EP/TP divisibility, memory
    check_cache   static-check outcomes per (env key, arguments, server env, target)
    identity      the run identity: what makes two runs the same experiment (pure)
    pipeline      the run as named steps: apply_trees -> ensure_env -> static_check | launch ->
                  verify -> benchmark -> quality -> jit_arch -> check_evidence -> store; sweeps
                  interleave repeats
    jit_check     the jit-arch step: cuobjdump over the launch's FlashInfer JIT cache, kept with the run
    jit_verdict   which of those modules hold an undeclared arch or predate the env (pure)
    attempt       the one place a run ends (ok, invalid, failed, interrupted), whatever happens
    evidence      did each patch run? server-log patterns and /server_info fields (pure)
    server        launch, readiness (/health_generate), /server_info, bind errors, crash lines
    supervisor    keeps a server's process group from outliving patchbench (parent-death signal)
    reaper        live-group registry; ends servers of dead patchbench processes, marks runs
    machine       provenance: GPUs, driver, CUDA, topology, CPU, host
    gpustate/     GPU state over the benchmark window (NVML), --strict-box; doctor's facts and rules
    hoststate     the host's CPU over the benchmark window: other processes' CPU time, steal
    bench/        the benchmark drivers: serving (async client), one_batch, sglang_jsonl

May import: toolkit.recipe, toolkit.tree, toolkit.envs, toolkit.results (a run is written into the
store as it happens) and the shared modules. Never toolkit.analysis, report, profile or commands.
"""
