"""Kernel tables: one op (FlashInfer's FP4 GEMM, its FP4 grouped MoE, a torch test op) timed and
checked per shape inside a recipe's env, compared per shape between recipes, exported as
flashinfer-bench traces.

Modules, one concept each: ``registry`` (the ops patchbench knows: dimensions, formats, FLOPs,
tolerances), ``shapes`` (the model's decode shapes from the roofline's model facts, or a shapes
file / FlashInfer trace dump), ``measure`` (runs ``toolkit/probes/kernel_bench.py`` with the env's
interpreter), ``bench`` (the `patchbench kernels` flow: env, op check, NoGPU, measure, store),
``records`` (JSON files under $PATCHBENCH_HOME/kernels), ``floor`` (roofline floor per shape),
``table`` (rows, per-shape comparison, rendering), ``plots`` (TFLOPS and efficiency against M),
``export`` (flashinfer-bench definitions / workloads / solutions / traces).
"""
