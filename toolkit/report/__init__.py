"""Stage 7, the report: Markdown (+ PNG plots beside it) and a self-contained HTML page.

    document  collect a report's data from the store and render Markdown / HTML
    plots     the report's plots, drawn with matplotlib
    site      `patchbench publish`: a static site of the store (site_layout, site_history, site_sweep)

May import: toolkit.analysis, toolkit.history, toolkit.kernels, toolkit.profile, toolkit.results and lower
stages.
"""
