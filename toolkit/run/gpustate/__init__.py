"""GPU state during a run (NVML through nvidia-ml-py), and the doctor's checks of the box.

    nvml      the one module that talks to NVML: open a session, read a GPU (successor getters first),
              decode clock-event reasons
    scope     the run's GPUs: the server's layout (base_gpu_id, tp x pp, x dp) within CUDA_VISIBLE_DEVICES,
              entries mapped to NVML by UUID, PCI bus id or MIG instance
    owners    whose processes: patchbench's and the server's tree, graphics, foreign; unmatchable pids
    sampler   a background thread sampling the run's GPUs every 0.2 s over the benchmark window
    summary   a sampling record -> the run's summary metrics (gpu_* in the registry) (pure)
    record    the run's glue: sampler for an attempt, gpu_state.json beside its logs, samples, --strict-box
    facts     what `patchbench doctor` reads about the box (NVML, CUPTI access, the env's CUDA builds)
    doctor    the doctor's rules over a facts dict (pure)

Without NVML or an NVIDIA GPU nothing is sampled and every output says "no GPU state", never zeros.
"""
