"""The backend registry: one record per name of common/fp8_names.py, the planner's cost records under the same
names, auto's order, provenance per record, and a name outside the shared list refused."""

import pytest
import torch

from common.fp8_names import FP8_BACKENDS, NAMES, PRICED
from common.fp8_record import layer_version
from planner.model import fp8_cost
from precision import backends
from precision.backend import backend_version, named
from precision.fp8_linear import LAYER_VERSION
from precision.modes import BACKENDS


def test_the_registry_and_the_planner_cover_exactly_the_shared_names():
    assert tuple(backends.REGISTRY) == NAMES  # fp8-train runs every named backend, in the listed order
    assert tuple(fp8_cost.BACKENDS) == PRICED  # the planner prices those with FP8 GEMMs
    assert BACKENDS == ("auto",) + NAMES  # what --fp8-backend and --runs take
    for entry in FP8_BACKENDS:
        record = backends.REGISTRY[entry.name]
        assert (record.name, record.description, record.fp8_gemms) == entry


def test_the_run_time_records_agree_with_the_cost_records_where_both_say_the_same_thing():
    for name, cost in fp8_cost.BACKENDS.items():
        run = backends.REGISTRY[name]
        assert run.fused_norm == cost.fused_norm, name  # te-fused: the norm writes the next GEMM's FP8 input
        assert run.fp8_gemms


def test_auto_tries_the_backends_in_the_documented_order():
    def order(precision):
        return [b.name for b in backends.REGISTRY.values() if precision in b.auto_precisions]
    assert order("fp8") == ["te", "torchao", "native", "emulated"]  # te-fused only by name
    assert order("mxfp8") == order("nvfp4") == order("mxfp4") == ["te", "emulated"]


def test_resolve_hands_back_the_record_and_says_what_it_skipped():
    cpu = torch.device("cpu")
    be, why = backends.resolve("nvfp4", "auto", cpu)
    assert be is backends.REGISTRY["emulated"]
    assert why.startswith("auto -> emulated: ") and "skipped te: TransformerEngine needs a CUDA GPU" in why
    with pytest.raises(backends.BackendUnavailable, match="--fp8-backend te-fused for fp8: TransformerEngine needs"):
        backends.resolve("fp8", "te-fused", cpu)
    with pytest.raises(backends.BackendUnavailable, match="mxfp8 runs through --fp8-backend te .* not torchao"):
        backends.resolve("mxfp8", "torchao", cpu)


def test_each_record_names_what_ran_it_with_its_version():
    assert backend_version(backends.TORCH, "bf16") == backend_version(backends.REGISTRY["emulated"], "mxfp8") == \
        f"torch {torch.__version__}"
    # the lab's own FP8 layer names its version: rows written before its record fix say none (version 1)
    for name in ("native", "emulated"):
        assert backend_version(backends.REGISTRY[name], "fp8") == f"torch {torch.__version__}, fp8_linear 2"
    assert layer_version(backend_version(backends.REGISTRY["native"], "fp8")) == LAYER_VERSION == 2
    assert layer_version("torch 2.11.0+cu130") == 1  # the committed H100/H200 native rows
    te = backend_version(backends.REGISTRY["te-fused"])
    assert te.startswith("transformer_engine ")  # te-fused is TE's too, installed or not
    assert backends.libraries() == [("transformer_engine", "TransformerEngine"), ("torchao", "torchao")]
    assert backends.lookup("torch") is backends.TORCH and backends.lookup("bf16") is None


def test_only_te_keeps_its_state_in_the_library_and_pickles_it_into_checkpoints():
    te = {n for n, b in backends.REGISTRY.items() if b.library_state is not None}
    assert te == {n for n, b in backends.REGISTRY.items() if b.checkpoint_pickles} == {"te", "te-fused"}
    assert {n for n, b in backends.REGISTRY.items() if not b.compiles} == te
    assert {n for n, b in backends.REGISTRY.items() if b.keeps_scale_state("fp8", "current")} == {"native", "emulated"}
    assert {n for n, b in backends.REGISTRY.items() if b.keeps_scale_state("fp8", "delayed")} == \
        {"te", "te-fused", "native", "emulated"}


def test_a_record_under_a_name_outside_the_shared_list_is_refused():
    with pytest.raises(ValueError, match="unknown FP8 backend 'mine'; valid: te, te-fused, torchao, native, emulated"):
        named("mine", package=None, library="", status=backends.EMULATED.status, convert=backends.EMULATED.convert)
