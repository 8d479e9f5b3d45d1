"""Stage 7, the report: Markdown (+ PNG plots beside it) and a self-contained HTML page.

    document  collect a report's data from the store and render Markdown / HTML
    plots     the report's plots, drawn with matplotlib

May import: toolkit.analysis, toolkit.profile, toolkit.results, toolkit.results.metrics and lower stages.
"""
