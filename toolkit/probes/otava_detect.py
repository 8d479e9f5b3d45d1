"""patchbench: change points of series by Apache Otava's E-Divisive, as one JSON line.

Run by `toolkit.history.otava` with the interpreter of Otava's own env (numpy/scipy pinned by
apache-otava, never patchbench's process). Reads {"series": [[values...], ...], "window", "max_pvalue",
"min_magnitude"} (or one series as "values") as JSON on stdin; analyses each as one Otava series
(`otava.series.Series.analyze`, what `otava analyze` runs on a CSV test) and prints, per series, each
change point: index (the first point after the change), forward change %, magnitude, means, standard
deviations, p-value, and the analysis' own seconds."""
import importlib.metadata as md, json, sys, time

from otava.series import AnalysisOptions, Metric, Series

req = json.load(sys.stdin)
opts = AnalysisOptions()
opts.window_len = int(req.get("window", opts.window_len))
opts.max_pvalue = float(req.get("max_pvalue", opts.max_pvalue))
opts.min_magnitude = float(req.get("min_magnitude", opts.min_magnitude))


def analyse(values):
    values = [float(v) for v in values]
    series = Series("patchbench", None, list(range(len(values))), {"m": Metric(1, 1.0, "")}, {"m": values}, {})
    t0 = time.perf_counter()
    found = series.analyze(opts).change_points.get("m", [])
    seconds = time.perf_counter() - t0
    return {"analysis_s": seconds, "change_points": [
        {"index": int(c.index), "forward_change_percent": float(c.forward_change_percent()),
         "magnitude": float(c.magnitude()), "mean_before": float(c.mean_before()),
         "mean_after": float(c.mean_after()), "stddev_before": float(c.stddev_before()),
         "stddev_after": float(c.stddev_after()), "pvalue": float(c.pvalue())} for c in found]}


many = req.get("series", [req.get("values", [])])
print(json.dumps({"otava": md.version("apache-otava"), "options": opts.to_json(),
                  "results": [analyse(v) for v in many], **({} if "series" in req else analyse(many[0]))}))
