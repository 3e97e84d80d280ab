"""The parallelism planner, a package imported by name as `common` is (PYTHONPATH=distributed-training).

It reads the labs' result CSVs, never their code, and imports only `common`: labs import the planner, the
planner imports common, common imports neither (common/tests/test_layering.py holds this from the
imports). Its CLIs run as modules:

    python -m planner.plan --params 70B --gpus 512      # make plan ARGS="..."
    python -m planner.guide                             # make guide

README.md lists the modules; import the one you need (`from planner.costs import step_costs`). This file
imports nothing, so that `import planner` stays cheap.
"""
