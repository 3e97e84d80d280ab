"""The guide: PARALLELISM_GUIDE.md and PLANNER_VALIDATION.md, written from the planner's runs and the evidence.

The top room: it may import every other (the model, calibration, the search, the evidence) and none imports it.
Its prose lies in the templates; every number in them is computed when the guide is written.

    python -m planner.guide                  # make guide: rewrite both documents in distributed-training/
    python -m planner.guide --calibrate results     # the guide for your cluster (guide.py says more)

    guide.py                    writes both documents: fills the templates' {{sections}}, checks the inputs first
    guide_answer.py             the guide's answer first: recommendations, how far to trust them, worked scenarios,
                                the projected-MFU plot
    experiments.py              the planner runs behind each rule of thumb, as tables and sentences
    inputs.py                   every results file the guide reads, read first: a damaged one is one line, exit 2
    __main__.py                 `python -m planner.guide`
    guide_template.md           the guide's hand-written narrative around its {{sections}}
    validation_template.md      the evidence document's narrative around its {{sections}}
    guide_answer_template.md    the sentences of the guide's answer, chosen by what the plans and CSVs show

Import the module you need (`from planner.guide import guide`); this file imports nothing.
"""
