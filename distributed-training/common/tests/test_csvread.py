"""The checked loader: every damaged, empty, foreign or mistyped file is one line naming it."""

import pandas as pd
import pytest

from common.csvread import BadResults, Schema, guard_report, read_json, read_table, read_tables, read_text

SCHEMA = Schema("test sweep", {"op": str, "size_bytes": int, "time_us": float, "ok": bool})
GOOD = "op,size_bytes,time_us,ok,note\r\nall_reduce,1024,12.5,true,\r\nall_gather,2048,,false,x\r\n"


@pytest.mark.parametrize("content, needle", [
    (b"", "is empty"),
    (b"  \n", "is empty"),
    (b'x,"y\n', "not a readable CSV"),
    (b"\x89PNG\r\n\x1a\n\x00\x00binary", "NUL bytes"),
    ("op,size_bytes\nä,1\n".encode("latin-1"), "not UTF-8 text"),
    (b"a,b,c\n1,2,3\n", "lacks the column(s) op, size_bytes, time_us, ok: not a test sweep CSV"),
    (b"op,size_bytes,time_us,ok\n", "has a header but no rows"),
    (GOOD.encode() + b"all_to_all,4096,1", "line 4 has 3 fields, the header 5: a half-written last row"),
    (b"op,size_bytes,time_us,ok\nx,1,2.0,true,extra\ny,1,2,true\n", "line 2 has 5 fields, the header 4: a damaged"),
    (b"op,size_bytes,time_us,ok\nx,1,fast,true\n", "line 2, column time_us: 'fast' is not a float"),
    (b"op,size_bytes,time_us,ok\nx,1.5,2,true\n", "line 2, column size_bytes: '1.5' is not an int"),
    (b"op,size_bytes,time_us,ok\nx,1,2,maybe\n", "column ok: 'maybe' is not a bool"),
    (b"op,op,time_us,ok\nx,1,2,true\n", "empty or repeated column names"),
    (b"\xef\xbb\xbf" + GOOD.encode(), "starts with a byte-order mark"),
    (GOOD.encode()[:-2], "line 3 does not end with a newline: a half-written last row"),
    (b"op,size_bytes,time_us,ok\nx,1,nan,true\n", "line 2, column time_us: 'nan' is not a finite number"),
    (b"op,size_bytes,time_us,ok\nx,1,-inf,true\n", "column time_us: '-inf' is not a finite number"),
    (b"op,size_bytes,time_us,ok\nx,1,1e999,true\n", "column time_us: '1e999' is not a finite number"),
    (b"op,size_bytes,time_us,ok\nx,1,2,true\ny,1,2,true\nx,1,2,true\n", "line 4 repeats line 2 exactly"),
], ids=["empty", "blank", "quote", "binary", "latin1", "foreign", "header-only", "cut-row", "long-row", "text-float",
        "text-int", "bad-bool", "dup-header", "bom", "cut-newline", "nan", "-inf", "overflow",
        "repeated-row"])
def test_bad_files_are_one_line_naming_the_file(tmp_path, content, needle):
    path = tmp_path / "sweep_x.csv"
    path.write_bytes(content)
    with pytest.raises(BadResults) as e:
        read_table(path, SCHEMA)
    assert needle in str(e.value) and "sweep_x.csv" in str(e.value) and "\n" not in str(e.value)


def test_a_good_file_reads_as_pandas_would(tmp_path):
    path = tmp_path / "s.csv"
    path.write_text(GOOD, newline="")
    df = read_table(path, SCHEMA)
    pd.testing.assert_frame_equal(df, pd.read_csv(path))  # the same values the reports read before
    assert df["size_bytes"].tolist() == [1024, 2048] and df["time_us"].isna().tolist() == [False, True]


def test_keys_and_observed_non_finite_values(tmp_path):
    """A column the schema names as an observation may hold NaN/inf (a diverged loss), and reads as NaN, never as a
    number."""
    path = tmp_path / "k.csv"
    path.write_text("op,size_bytes,time_us,ok\nx,1,nan,true\ny,1,inf,true\n")
    df = read_table(path, Schema("observed", SCHEMA.columns, nonfinite=("time_us",)))
    assert df["time_us"].isna().tolist() == [True, False] and df["time_us"].iloc[1] == float("inf")


@pytest.mark.parametrize("content, needle", [
    (b"", "is empty"), (b"\x00\x01\xff", "not UTF-8 text"), (b'{"steps": 5', "is not valid JSON"),
    (b"[1, 2]", "holds a JSON list, not a saved config (an object)"), (b'{"lr": NaN}', "NaN is not a number JSON"),
    (b"\xef\xbb\xbf{}", "a byte-order mark"), (b'{"steps": "five"}', "steps is 'five', not an int"),
], ids=["empty", "binary", "cut", "list", "nan", "bom", "wrong-type"])
def test_json_and_text_inputs_are_checked(tmp_path, content, needle):
    path = tmp_path / "x.config.json"
    path.write_bytes(content)
    with pytest.raises(BadResults) as e:
        read_json(path, "a saved config", {"steps": int, "lr": float})
    assert needle in str(e.value) and "x.config.json" in str(e.value) and "\n" not in str(e.value)
    path.write_text('{"steps": 5, "lr": 1, "name": "x"}')
    assert read_json(path, "a saved config", {"steps": int, "lr": float}) == {"steps": 5, "lr": 1, "name": "x"}
    assert read_text(path, "a topology") == '{"steps": 5, "lr": 1, "name": "x"}'
    empty = Schema("events", {"op": str}, allow_empty=True)
    (tmp_path / "e.csv").write_text("op,x\n")
    assert read_table(tmp_path / "e.csv", empty).empty


def test_folders_missing_folders_and_the_report_guard(tmp_path, capsys):
    with pytest.raises(BadResults, match="results folder .*nowhere does not exist; run it"):
        read_tables(tmp_path / "nowhere", "s_*.csv", SCHEMA, hint="run it")
    with pytest.raises(BadResults, match=r"no s_\*.csv in"):
        read_tables(tmp_path, "s_*.csv", SCHEMA)
    assert read_tables(tmp_path, "s_*.csv", SCHEMA, required=False).empty
    (tmp_path / "s_1.csv").write_text(GOOD, newline="")
    (tmp_path / "s_2.csv").write_text(GOOD, newline="")
    assert len(read_tables(tmp_path, "s_*.csv", SCHEMA)) == 4

    @guard_report
    def main():
        read_table(tmp_path / "missing.csv", SCHEMA)

    with pytest.raises(SystemExit) as e:
        main()
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "missing.csv: no such file" in err


KEYED = Schema("keyed", SCHEMA.columns, key=("op", "size_bytes", "dtype"))  # dtype: a key column older files lack


@pytest.mark.parametrize("rows, needle", [
    ("x,1,2,true\nx,1,3,true\n", "line 3 repeats the key (op=x, size_bytes=1) of line 2 with another time_us (2 there, "
                                 "3 here): two measurements of one thing?"),
    ("x,1,2,true\ny,1,2,true\nx,1,2,true\n", "line 4 repeats line 2 exactly"),
    ("x,1,2,true\nx,1,2,false\n", "line 3 repeats the key (op=x, size_bytes=1) of line 2 with another ok"),
], ids=["conflicting", "exact", "conflicting-bool"])
def test_a_key_seen_twice_is_one_line_whether_the_rows_agree_or_not(tmp_path, rows, needle):
    """A repeated (run, step) with another value shifted fp8-train's tokens/s silently: a schema names its key."""
    path = tmp_path / "k.csv"
    path.write_text("op,size_bytes,time_us,ok\n" + rows)
    with pytest.raises(BadResults) as e:
        read_table(path, KEYED)
    assert needle in str(e.value) and "k.csv" in str(e.value) and "\n" not in str(e.value)
    path.write_text("op,size_bytes,time_us,ok,dtype\nx,1,2,true,bf16\nx,1,3,true,fp32\n")  # the key tells them apart
    assert len(read_table(path, KEYED)) == 2
    path.write_text("op,size_bytes,time_us,ok\nx,1,2,true\nx,1,3,true\n")
    assert len(read_table(path, SCHEMA)) == 2  # no key named: only exact repeats are refused


@pytest.mark.parametrize("column, value, schema", [
    ("time_us", "-2.5", SCHEMA),  # a unit of time
    ("busbw_GBps", "-1e-3", SCHEMA),  # a rate, not declared by the schema: its unit says it all the same
    ("peak_mem_bytes", "-1", SCHEMA),
    ("underflow_frac", "-0.5", SCHEMA),
    ("grad_norm", "-1.0", Schema("normed", SCHEMA.columns, nonneg=("grad_norm",))),  # no unit: the schema says so
], ids=["time", "busbw", "bytes", "fraction", "named"])
def test_a_negative_value_where_none_can_be_is_one_line(tmp_path, column, value, schema):
    path = tmp_path / "n.csv"
    rows = [{"op": "x", "size_bytes": "1", "time_us": "2", "ok": "true", column: "1"},
            {"op": "y", "size_bytes": "2", "time_us": "3", "ok": "false", column: value}]
    path.write_text("\n".join(",".join(r.values()) for r in [dict(zip(rows[0], rows[0])), *rows]) + "\n")
    with pytest.raises(BadResults) as e:
        read_table(path, schema)
    assert f"line 3, column {column}: {value} is negative, which it cannot be" in str(e.value)
    assert "n.csv" in str(e.value) and "\n" not in str(e.value)


def test_signed_columns_and_text_may_be_negative(tmp_path):
    path = tmp_path / "e.csv"
    path.write_text("op,size_bytes,time_us,ok,error_s,step_s\nx,1,2,true,-0.5,-\n")
    assert read_table(path, Schema("signed", SCHEMA.columns, signed=("error_s",))).shape == (1, 6)  # '-' is no number
    with pytest.raises(BadResults, match="column error_s: -0.5 is negative"):
        read_table(path, SCHEMA)


def test_a_file_read_again_is_checked_by_its_bytes_and_each_reader_gets_its_own_copy(tmp_path):
    """A file that passed is not checked again while its bytes stay the same (csvread._PASSED); a file rewritten in
    place, to the same size and the same modification time, is read afresh, and a caller that edits what it got
    changes nothing the next reader gets."""
    import os

    from common.csvread import read_rows
    path = tmp_path / "sweep_x.csv"
    path.write_text(GOOD)
    first = read_table(path, SCHEMA)
    first.loc[0, "op"] = "edited"
    read_rows(path, SCHEMA)[0]["op"] = "edited"
    assert read_table(path, SCHEMA)["op"].tolist() == ["all_reduce", "all_gather"]
    assert [r["op"] for r in read_rows(path, SCHEMA)] == ["all_reduce", "all_gather"]
    stamp = path.stat().st_mtime_ns
    path.write_text(GOOD.replace("12.5", "nan!"))  # one cell, same length
    os.utime(path, ns=(stamp, stamp))
    with pytest.raises(BadResults, match="line 2, column time_us: 'nan!' is not a float"):
        read_table(path, SCHEMA)
    path.write_text(GOOD)
    read_table(path, SCHEMA)  # passed, and kept
    with pytest.raises(BadResults, match="line 3, column note: 'x' is not an int"):  # the same bytes, another schema
        read_table(path, SCHEMA.with_columns(note=int))
