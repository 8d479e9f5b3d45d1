"""Where a sweep runs: here (the default) or on a Slurm cluster (`--executor slurm`).

  config.py  the `[cluster]` table of the user config + command-line knobs -> ClusterConfig (pure)
  job.py     what runs on the node: one sweep, its runs exported to the job's folder as they happen
  slurm.py   submission through submitit, the wait loop (progress per job), import as jobs finish
  slurm_variants.py  bisect probes / attribution variants as jobs (a VariantMeter that submits)
  slurm_track.py     `track`'s pending upstream points, one job each, all submitted at once
"""
