"""Reporting: REPORT.md, its plots and the closing table of a GPU job, from the committed CSVs alone.

It reads result files, never a run: it imports from precision only the records of names (modes, backends,
formats: what a backend is called, which library it is) and from health only the panels it draws, never the
training loop or the layers that run a model (common/tests/test_layering.py holds it so). report.py and
quick_summary.py are its command lines; dashboard.py checks its CSVs with tables.py.

    sections.py         REPORT.md: each {{name}} of report_template.md one function; every model through one
                        model_template.md (the H100, H200 and CPU sections alike)
    tables.py           the schemas of the result CSVs: a damaged file is one line, exit 2
    comparison.py       one table per model from every folder: its identity, tokens/s, vs BF16, the FP8 bound,
                        gain captured and bound ratio, MFU, the targets (each definition once)
    evidence.py         the numbers the sentences are picked by: gaps at every evaluation, the noise, step 0 of
                        delayed scaling, damaged scale records, underflow
    findings.py         every sentence that compares, ranks or explains, picked by a predicate; the words are
                        findings_template.md (common.findings: Sentences, fill, block)
    scale_stats.py      every run's per-tensor scales and amaxes, one row per run, or why a cell is empty
    plots.py            the answer, loss, scales, underflow, crossover and health-dashboard PNGs
    bench_report.py     the step-cost benchmarks' section
    health_report.py    the training-health section: alerts, NaN actions, the health demo
    quick_summary.py    the closing table of a short GPU job
"""
