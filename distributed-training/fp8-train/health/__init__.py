"""Health: what a run's numbers say about it while it trains, whatever precision runs it.

Cheap metrics every step, detectors over their series, and the panels that draw them in three places (the
HTML dashboard, TensorBoard, the report's PNG copy). Nothing here imports precision, training, benchmarks or
reporting (common/tests/test_layering.py holds it so): the training loop feeds it numbers, the report reads
its panels.

    metrics.py      grad/param/update norms per layer group, activation ranges, gradient SNR, memory
    alerts.py       the detectors (grad spike, loss plateau, scale jump, non-finite) and their thresholds
    panels.py       the health panels, defined once: which CSV column feeds which panel under which name
    tblog.py        TensorBoard events of a run, written during the run beside its CSVs
    dashboard.py    the self-contained HTML page of one run or several overlaid (dashboard.js draws it)
"""
