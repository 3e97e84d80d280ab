"""The evidence: the cost model beside what was measured, published runs and this repository's own GPU rows.

Every module here reads measurements (a paper's table, a lab's CSV) and prices them with the cost model
(planner.model, through the search where a run leaves knobs unstated); the model never reads them back
(common/tests/test_layering.py holds this). The guide quotes these sections.

Published runs
    cases.py                  the record of a published run: the configuration and the software stack it ran
    published.py              large published runs, the `fit` ones (the constants' fit) and the held-out ones
    published_small.py        small models on one node and a few (issue 29), all held out
    published_fp8.py          published FP8-against-BF16 pairs, held out
    fit_compute.py            fits the compute model's free constants on the `fit` runs (results/compute_fit.csv)
    accuracy.py               the planner against published runs, as markdown: errors, SC21's choices, memory
    before_after.py           issue 15: the planner at an older commit and now, on the published runs
    regimes_before_after.py   issue 29: the same, per regime (one node, 64-1024 GPUs, more)
    old_planner.py            the older planner asked through its own interface: runs inside the older tree
This repository's runs
    own_runs.py               every lab's GPU rows, one Run each, read from the rows' own columns
    explain_rows.py           the cost model's prediction for every Run: the one function that prices a measured row
    unexplained.py            the rows the model does not explain, each with its reason in one line
    vs_measured.py            predicted beside measured: the section each lab's report embeds, the guide's table
    from_run.py               `make plan ARGS="--from-run CSV"`: one measured row priced as its report prices it
    ranking.py                parallel-3d's ranking set: does the planner order measured layouts as measured?
    against_pytorch.py        the planner against PyTorch's memory and step at scale (parallel-3d's CSVs)
Both, as documents
    validation.py             PLANNER_VALIDATION.md's sections by regime, own rows and ranking
    prose.py                  the generated documents' paragraph and table
    kept.py                   work the sections repeat (pricing every published run), done once per render

Import the module you need (`from planner.evidence import vs_measured`); this file imports nothing.
"""
