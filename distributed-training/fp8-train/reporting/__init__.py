"""Reporting: REPORT.md, its plots and the closing table of a GPU job, from the committed CSVs alone.

It reads result files, never a run: it imports from precision only the records of names (modes, backends,
formats: what a backend is called, which library it is) and from health only the panels it draws, never the
training loop or the layers that run a model (common/tests/test_layering.py holds it so). report.py and
quick_summary.py are its command lines; dashboard.py checks its CSVs with tables.py.

    sections.py         REPORT.md: each {{name}} of report_template.md one function, over every results folder
    tables.py           the schemas of the result CSVs: a damaged file is one line, exit 2
    comparison.py       one table per model from every folder: its identity, the BF16 band of distinct seeds,
                        tokens/s, vs BF16, the FP8 bound, MFU (each definition once)
    findings.py         the answer's facts and its opening lines (findings_template.md picks the wording)
    story.py            what the runs show, seed by seed and alert by alert (story_template.md)
    scale_stats.py      every run's per-tensor scales and amaxes, role by role, or why a cell is empty
    answer_plots.py     the plots that carry the answer (FP8 minus BF16 per seed, underflow)
    report_plots.py     the audit's plots (loss over the band, scales, the speedup crossover)
    bench_report.py     the step-cost benchmarks' section
    health_report.py    the training-health section: alerts, recovery, PNG copies of the dashboard's panels
    quick_summary.py    the closing table of a short GPU job
"""
