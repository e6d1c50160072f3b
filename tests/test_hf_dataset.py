"""task=hf_dataset and task=gsm8k on local files the tests write (never a download)."""

from __future__ import annotations

import csv
import random

import pytest
from gsm8k_helpers import gsm8k_rows, write_jsonl

from twinkle_exp.tasks import TASKS, GSM8KTask, HFDatasetTask, gsm8k_final_answer
from twinkle_exp.tasks.answers import get_answer_extractor


@pytest.fixture(autouse=True)
def datasets_cache(tmp_path, monkeypatch):
    """`datasets` writes an Arrow copy of every file it reads: keep it in tmp, and stay offline."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf_datasets_cache")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)


def test_gsm8k_answer_is_the_number_after_the_marks():
    assert gsm8k_final_answer("3 + 4 = <<3+4=7>>7\n#### 7") == "7"
    assert gsm8k_final_answer("a #### b\n#### 1,200 ") == "1200"  # the last marks; thousands commas dropped
    with pytest.raises(ValueError, match="no '####'"):
        gsm8k_final_answer("The answer is 7.")
    with pytest.raises(ValueError, match="nothing after"):
        gsm8k_final_answer("7 ####  ")


def test_answer_extractors_by_name_or_import_path():
    assert get_answer_extractor("gsm8k") is gsm8k_final_answer
    assert get_answer_extractor("twinkle_exp.tasks.gsm8k_final_answer") is gsm8k_final_answer
    with pytest.raises(ValueError, match="task.answer_extractor='nope'"):
        get_answer_extractor("nope")
    with pytest.raises(ValueError, match="cannot import"):
        get_answer_extractor("twinkle_exp.tasks.no_such_function")


def test_gsm8k_from_a_local_file_holds_out_distinct_prompts(tmp_path):
    rows = gsm8k_rows(30)
    task = GSM8KTask(path=str(write_jsonl(tmp_path / "train.jsonl", rows)), num_validation=5, seed=3)
    assert TASKS["gsm8k"] is GSM8KTask and TASKS["hf_dataset"] is HFDatasetTask
    validation = task.validation_set()
    assert len(validation) == 5 and validation == task.validation_set()
    gold = {r["question"]: r["answer"].rsplit("#### ", 1)[1] for r in rows}
    assert all(gold[ex.prompt] == ex.answer for ex in validation)
    train = task.sample(200, random.Random(0))
    assert not {ex.prompt for ex in train} & {ex.prompt for ex in validation}
    assert len({ex.prompt for ex in train}) == 25  # every other prompt is drawn
    other_seed = GSM8KTask(path=str(tmp_path / "train.jsonl"), num_validation=5, seed=4)
    assert other_seed.validation_set() != validation


def test_gsm8k_with_a_validation_file(tmp_path):
    rows = gsm8k_rows(30)
    train = write_jsonl(tmp_path / "train.jsonl", rows[:20] + rows[25:])
    test = write_jsonl(tmp_path / "test.jsonl", rows[18:25])  # overlaps train in rows 18, 19
    task = GSM8KTask(path=str(train), validation_path=str(test), num_validation=100)
    assert {ex.prompt for ex in task.validation_set()} == {r["question"] for r in rows[18:25]}
    sampled = {ex.prompt for ex in task.sample(300, random.Random(0))}
    assert sampled == {r["question"] for r in rows[:18] + rows[25:]}  # the overlap is held out
    assert task.data_files() == [str(train), str(test)]  # their content keys the warm-start cache


def test_a_gold_answer_without_marks_is_refused_by_row(tmp_path):
    rows = gsm8k_rows(10)
    rows[6]["answer"] = "He has 12 apples."
    path = write_jsonl(tmp_path / "train.jsonl", rows)
    with pytest.raises(
        ValueError, match=r"train.jsonl, row 6 \(prompt 'Tom has .*bad gold answer.*no '####'"
    ):
        GSM8KTask(path=str(path), num_validation=2)


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_hf_dataset_reads_local_files_with_a_prompt_template(tmp_path, suffix):
    rows = [{"a": str(i), "b": str(2 * i), "sum": str(3 * i)} for i in range(12)]
    path = tmp_path / f"data{suffix}"
    if suffix == ".jsonl":
        write_jsonl(path, rows)
    elif suffix == ".csv":
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=["a", "b", "sum"])
            writer.writeheader()
            writer.writerows(rows)
    else:
        import datasets

        datasets.Dataset.from_list(rows).to_parquet(str(path))
    task = HFDatasetTask(str(path), prompt_template="{a}+{b}=", answer_field="sum", num_validation=3)
    examples = task.validation_set() + task.sample(50, random.Random(0))
    for ex in examples:
        a, b = ex.prompt.removesuffix("=").split("+")
        assert int(ex.answer) == int(a) + int(b)
    assert len(task.validation_set()) == 3


def test_hf_dataset_settings_errors_name_the_setting(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [{"q": f"q{i}", "a": i} for i in range(5)])
    with pytest.raises(
        ValueError, match=r"row 0: task.prompt_template names the field 'question'.*\['a', 'q'\]"
    ):
        HFDatasetTask(str(path), num_validation=1)
    with pytest.raises(ValueError, match="row 0 .*no field task.answer_field='answer'"):
        HFDatasetTask(str(path), prompt_template="{q}", num_validation=1)
    with pytest.raises(ValueError, match="5 distinct prompts, too few to hold out task.num_validation=5"):
        HFDatasetTask(str(path), prompt_template="{q}", answer_field="a", num_validation=5)
    with pytest.raises(ValueError, match="task.validation_split='test', but task.path=.* is a single file"):
        HFDatasetTask(str(path), prompt_template="{q}", answer_field="a", validation_split="test")
    with pytest.raises(ValueError, match="unknown file type '.txt'"):
        HFDatasetTask(str(write_jsonl(tmp_path / "d.txt", [])), num_validation=1)
    with pytest.raises(ValueError, match="task.path='no/such-dataset-here'"):
        HFDatasetTask("no/such-dataset-here", num_validation=1)


def test_conflicting_answers_for_one_prompt_are_refused(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [{"q": "x", "a": 1}, {"q": "y", "a": 2}, {"q": "x", "a": 3}])
    with pytest.raises(ValueError, match=r"row 2: prompt 'x' already has answer '1' \(row 0\), here '3'"):
        HFDatasetTask(str(path), prompt_template="{q}", answer_field="a", num_validation=1)
