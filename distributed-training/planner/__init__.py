"""The parallelism planner, a package imported by name as `common` is (PYTHONPATH=distributed-training).

It reads the labs' result CSVs, never their code, and imports only `common`: labs import the planner, the
planner imports common, common imports neither (common/tests/test_layering.py holds this from the
imports). Inside, its rooms stand on each other in one order, held by the same test:

    model/       what a plan costs: pure functions of the model's shape, the cluster and the software stack
    calibrate/   what the labs measured on your cluster replaces the hardware table's figures (--calibrate)
    search/      enumerate the plans a cluster allows, price them all, choose one, the command that runs it
    evidence/    the model beside what was measured: published runs and this repository's GPU rows
    guide/       PARALLELISM_GUIDE.md and PLANNER_VALIDATION.md, written from the planner and the evidence
    plan.py      the CLI: one plan (make plan)

    guide  ->  evidence  ->  search, calibrate  ->  model      (the model imports no other room and reads no file)

Its CLIs run as modules:

    python -m planner.plan --params 70B --gpus 512      # make plan ARGS="..."
    python -m planner.guide                             # make guide

Each room's __init__.py lists its modules; import the one you need (`from planner.model.costs import
step_costs`). No __init__ imports anything, so that `import planner` stays cheap.
"""
