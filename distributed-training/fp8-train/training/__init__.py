"""Training: the runs of a plan, each one GPT in one precision, and everything a long run needs to survive.

It stands on precision (the model in its precision, through its backend) and health (the metrics and alerts it
feeds); it never imports benchmarks or reporting (common/tests/test_layering.py holds it so). train.py is its
command line.

    settings.py     the Config (a frozen dataclass: every flag, its default and help), the presets, the parser
    runner.py       the runs of a plan, one after another, in its run folder (common.runner.open_run); the sweep
    one_run.py      a run from start to end: its model built, resumed or started, trained by the RunLoop, its bound
    plan.py         the plan: which runs, each backend resolved before anything is written; --only
    trainer.py      one run: the step in named phases, NaN policies, FP8 state, checkpoint contents
    runloop.py      the loop around the step: CSV rows, alerts and events, checkpoints, dashboard, progress
    checkpoint.py   atomic checkpoints, SIGTERM handling
    faults.py       deterministic fault injection (spike, NaN, overflow) for the demo and the tests
    bound.py        the measured FP8 bound of a model: its BF16 step with the FP8-able GEMMs at FP8 speed
"""
