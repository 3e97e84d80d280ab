"""Test support for every lab's tests (and common's): imported by tests only, never by a runner, a report or a
shared package at run time (common/tests/test_layering.py holds that).

    ranks      run a function on N forked gloo ranks: run_ranks, RankFailed, free_port
    bad_input  one line, exit 2, nothing written: expect_bad_input, tree_state, keep_tracked_files, git_status;
               the runner's check pass over world sizes: check_pass, WORLDS
    reports    a report under test: report_opening, expect_report_refuses; every input of an entry point damaged
               every way: damaged_inputs_problems (a report), damage_problems (any entry point), inputs_of,
               opened_during
    damage     the ways a results file is damaged: DAMAGES, damaged
    gpu        GPU stand-ins on a machine without one: as_gpu_rows, fake_nvidia_smi, no_gpu_mark
    sweeps     an attention lab (common.attention_sweep): every bad-input test from its cases (bad_input_tests, over
               refusal_test, sweep_refusals, nothing_to_resume_test, report_refusal_test), its committed tables
               and opening under test (committed_tables, opening_texts), bench_twice

The names are handed on here, so a test imports what it uses from `testkit` itself; the builders of a module's
tests (sweeps.bad_input_tests, bad_input.report_arguments_test) and sweeps' committed_tables and opening_texts
are imported from their modules.
"""

from .bad_input import WORLDS, check_pass, expect_bad_input, git_status, keep_tracked_files, tree_state
from .damage import DAMAGES, damaged
from .gpu import DRIVERS, H100_PROVENANCE, as_gpu_rows, fake_nvidia_smi, no_gpu_mark
from .ranks import RankFailed, free_port, run_ranks
from .reports import (damage_problems, damaged_inputs_problems, expect_report_refuses, inputs_of, opened_during,
                      report_opening)
from .sweeps import bench_twice, nothing_to_resume_test, refusal_test, report_refusal_test, sweep_refusals

__all__ = ["DAMAGES", "DRIVERS", "H100_PROVENANCE", "WORLDS", "RankFailed", "as_gpu_rows", "bench_twice",
           "check_pass", "damage_problems", "damaged", "damaged_inputs_problems", "expect_bad_input",
           "expect_report_refuses", "fake_nvidia_smi", "free_port", "git_status", "inputs_of", "keep_tracked_files",
           "no_gpu_mark", "nothing_to_resume_test", "opened_during", "refusal_test", "report_opening",
           "report_refusal_test", "run_ranks", "sweep_refusals", "tree_state"]
