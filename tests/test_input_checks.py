"""Start-up checks of data, model and reward inputs: each bad input is one line naming the file, row or key."""

from __future__ import annotations

import json

import pytest
from gsm8k_helpers import gsm8k_rows, write_jsonl
from hydra import compose

from twinkle_exp.config.checks import config_problems
from twinkle_exp.config.checks import examples as input_checks
from twinkle_exp.config.store import register_configs
from twinkle_exp.models import CharTokenizer
from twinkle_exp.tasks import Example, GSM8KTask

register_configs()


pytestmark = pytest.mark.usefixtures("hydra_conf")  # conftest.py: the shipped config tree


def problems(*overrides: str) -> list[str]:
    return config_problems(compose(config_name="config", overrides=list(overrides)))


def longest_prompt(*row_lists: list[dict]) -> int:
    """Tokens of the longest question with a one-character-per-token tokenizer, BOS included."""
    return 1 + max(len(row["question"]) for rows in row_lists for row in rows)


@pytest.fixture
def gsm8k_files(tmp_path):
    """GSM8K-format train and test files (questions of about 65 characters)."""
    return write_jsonl(tmp_path / "train.jsonl", gsm8k_rows(60)), write_jsonl(
        tmp_path / "test.jsonl", gsm8k_rows(20, seed=1)
    )


def gsm8k(train, test, *more: str) -> list[str]:
    return problems("task=gsm8k", f"task.path={train}", f"task.validation_path={test}", *more)


# --- the GSM8K command of docs/real-models.md with the default policy -------------------------------------
def test_the_readme_gsm8k_command_with_the_built_in_policy_runs_when_its_prompts_fit(gsm8k_files):
    # Was: KeyError: 'prompt' (the start-up check read every file as {"prompt", "answer"} lines).
    assert gsm8k(*gsm8k_files, "policy.max_seq_len=128") == []


def test_the_readme_gsm8k_command_says_in_one_line_what_the_built_in_policy_lacks(gsm8k_files):
    train, _ = gsm8k_files
    [line] = gsm8k(*gsm8k_files)
    longest = longest_prompt(gsm8k_rows(60), gsm8k_rows(20, seed=1))
    assert line.startswith(
        f"policy.max_seq_len=64: prompts of up to {longest} tokens plus rollout.max_new_tokens=8"
    )
    assert f"(the longest prompt: {train}, row " in line and "policy=hf" in line


def test_hf_dataset_with_the_built_in_policy(tmp_path):
    rows = [{"q": f"{i}+{i}=", "a": str(2 * i)} for i in range(40)]
    data = write_jsonl(tmp_path / "sums.jsonl", rows)
    task = ["task=hf_dataset", f"task.path={data}", "task.prompt_template='{q}'", "task.answer_field=a"]
    assert problems(*task, "task.num_validation=8") == []
    rows[7]["q"] = "caf\u00e9"
    write_jsonl(data, rows)
    assert problems(*task, "task.num_validation=8") == [
        f"{data}, row 7: '\u00e9' is not in the built-in policy's character set; use policy=hf for such text"
    ]


# --- rows --------------------------------------------------------------------------------------------------
def test_a_row_without_its_prompt_field_is_refused_naming_file_and_row(tmp_path):
    rows = gsm8k_rows(30)
    del rows[4]["question"]  # datasets fills the missing field with null; the prompt would read 'None'
    train = write_jsonl(tmp_path / "train.jsonl", rows)
    with pytest.raises(ValueError) as err:
        GSM8KTask(path=str(train), num_validation=4)
    assert str(err.value) == f"{train}, row 4: the field 'question' of task.prompt_template is empty (null)"


def test_an_empty_validation_file_names_its_own_key(tmp_path, gsm8k_files):
    train, _ = gsm8k_files
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    found = gsm8k(train, empty)
    assert found == [f"ValueError: task.validation_path={str(empty)!r}: the file is empty"], found


def test_a_missing_validation_file_names_its_own_key(tmp_path, gsm8k_files):
    train, _ = gsm8k_files
    [line] = gsm8k(train, tmp_path / "nope.jsonl")
    assert line.startswith(f"ValueError: task.validation_path={str(tmp_path / 'nope.jsonl')!r}: no such file")


def test_a_jsonl_line_that_is_not_utf8_is_named(tmp_path):
    # Was: "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xe9 ...", naming neither file nor line.
    data = tmp_path / "t.jsonl"
    lines = [json.dumps({"prompt": f"{i}=", "answer": str(i)}).encode() for i in range(20)]
    lines[3] = b'{"prompt": "caf\xe9=", "answer": "1"}'
    data.write_bytes(b"\n".join(lines) + b"\n")
    found = problems("task=jsonl", f"task.path={data}", "task.num_validation=4")
    assert found == [f"ValueError: {data}, line 4: not UTF-8 text (byte 0xe9 at column 16)"], found


def test_an_empty_gold_answer_is_refused(tmp_path):
    # Was: accepted; an empty completion then scores as exact.
    data = tmp_path / "t.jsonl"
    lines = [json.dumps({"prompt": f"{i}=", "answer": str(i)}) for i in range(20)]
    lines[2] = json.dumps({"prompt": "2=", "answer": " "})
    data.write_text("\n".join(lines) + "\n")
    assert problems("task=jsonl", f"task.path={data}", "task.num_validation=4") == [
        f"ValueError: {data}, line 3: 'answer' is empty"
    ]
    rows = [{"q": f"{i}=", "a": str(i)} for i in range(20)]
    rows[5]["a"] = ""
    sums = write_jsonl(tmp_path / "sums.jsonl", rows)
    task = ["task=hf_dataset", f"task.path={sums}", "task.prompt_template='{q}'", "task.answer_field=a"]
    assert problems(*task, "task.num_validation=4") == [
        f"ValueError: {sums}, row 5 (prompt '5='): the gold answer is empty (field 'a')"
    ]


# --- prompt length against any policy's positions -----------------------------------------------------------
@pytest.fixture(scope="module")
def hf_128(tmp_path_factory):
    """A random tiny Llama with 128 positions and a character-level tokenizer (one token per character)."""
    from hf_helpers import char_level_hf_tokenizer

    from twinkle_exp.models import build_tiny_hf_model

    directory = tmp_path_factory.mktemp("hf_128")
    tokenizer = char_level_hf_tokenizer()
    build_tiny_hf_model(len(tokenizer), max_position_embeddings=128).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def test_a_hugging_face_model_s_positions_bound_prompt_and_budget(hf_128, gsm8k_files):
    train, _ = gsm8k_files
    hf = ["policy=hf", f"policy.name_or_path={hf_128}"]
    assert gsm8k(*gsm8k_files, *hf, "rollout.max_new_tokens=32") == []
    # Was: no problem at start-up; sampling ran past the model's 128 positions without a word.
    [line] = gsm8k(*gsm8k_files, *hf, "rollout.max_new_tokens=64")
    longest = longest_prompt(gsm8k_rows(60), gsm8k_rows(20, seed=1))
    assert line.startswith(
        f"policy.name_or_path={str(hf_128)!r} (128 positions, its max_position_embeddings): prompts of up to "
        f"{longest} tokens plus rollout.max_new_tokens=64 need {longest + 64} (the longest prompt: "
    )
    assert f"{train}, row " in line


def test_a_prompt_longer_than_a_small_model_is_named(tiny_hf_dir, tmp_path, gsm8k_files):
    # Was: IndexError in the warm-start (the tiny Llama has 64 positions).
    rows = gsm8k_rows(30)
    rows[11]["question"] = "Tom has " + "many " * 30 + "apples. How many?"
    train = write_jsonl(tmp_path / "long.jsonl", rows)
    [line] = gsm8k(train, gsm8k_files[1], "policy=hf", f"policy.name_or_path={tiny_hf_dir}")
    assert (
        f"(64 positions, its max_position_embeddings): prompts of up to {longest_prompt(rows)} tokens" in line
    )
    assert f"(the longest prompt: {train}, row 11)" in line


class _Counting(CharTokenizer):
    def __init__(self):
        super().__init__()
        self.longest_text = 0

    def encode(self, text: str) -> list[int]:
        self.longest_text = max(self.longest_text, len(text))
        return super().encode(text)


def test_a_runaway_line_is_refused_without_tokenizing_all_of_it():
    tokenizer = _Counting()
    huge = Example(prompt="a" * (3 * input_checks.MAX_PROMPT_CHARS), answer="1")
    located = [(Example("ab", "1"), "f.jsonl, line 1"), (huge, "f.jsonl, line 2")]
    [line] = input_checks.prompt_length_problems(located, tokenizer, 64, 8, "policy.max_seq_len=64", "x")
    assert line.startswith("policy.max_seq_len=64: prompts of at least 1000001 tokens plus")
    assert "(the longest prompt: f.jsonl, line 2, counted in its first 1000000 characters)" in line
    assert tokenizer.longest_text == input_checks.MAX_PROMPT_CHARS


# --- models, templates, seeds --------------------------------------------------------------------------------
def test_a_missing_model_directory_is_named():
    # Was: transformers' "Repo id must be in the form 'repo_name' or 'namespace/repo_name'" in a traceback.
    [line] = problems("policy=hf", "policy.name_or_path=/no/such/model")
    assert line.startswith("policy.name_or_path='/no/such/model': no such directory")


def test_a_missing_reference_model_directory_is_named(tiny_hf_dir):
    found = problems(
        "policy=hf", f"policy.name_or_path={tiny_hf_dir}", "policy.reference_name_or_path=./no/ref"
    )
    assert len(found) == 1 and found[0].startswith(
        "policy.reference_name_or_path='./no/ref': no such directory"
    )


def test_a_model_directory_without_a_config_is_named(tmp_path):
    [line] = problems("policy=hf", f"policy.name_or_path={tmp_path}")
    assert line.startswith(f"policy.name_or_path={str(tmp_path)!r}: cannot load the directory (")


def test_a_chat_template_needs_one(tiny_hf_dir, gsm8k_files):
    # Was: a traceback from the run's build (policy=hf), or the KeyError above (the built-in policy).
    assert gsm8k(
        *gsm8k_files, "policy=hf", f"policy.name_or_path={tiny_hf_dir}", "task.chat_template=true"
    ) == [
        f"task.chat_template=true, but the tokenizer of {str(tiny_hf_dir)!r} has no chat template; "
        "use an instruction-tuned model or set task.chat_template=false"
    ]
    assert gsm8k(*gsm8k_files, "policy.max_seq_len=128", "task.chat_template=true") == [
        "task.chat_template=true needs a Hugging Face tokenizer (policy=hf), got CharTokenizer"
    ]


@pytest.mark.parametrize("key", ["seed", "warmup.seed"])
def test_a_seed_outside_numpy_s_range(key):
    # Was: numpy's "-1 is not in bounds" in a traceback, after the run directory was made.
    assert problems(f"{key}=-1") == [
        f"{key} must be an integer from 0 to 4294967295 (numpy's seed range), got -1"
    ]
    assert problems(f"{key}=4294967295") == []


# --- rewards: gold answers up front, a budget no answer fits ---------------------------------------------------
def test_a_gold_answer_math_verify_cannot_parse_is_named_up_front(tmp_path, gsm8k_files):
    pytest.importorskip("math_verify")
    rows = gsm8k_rows(30)
    rows[9]["answer"] = "He has some.\n#### lots"
    train = write_jsonl(tmp_path / "bad_gold.jsonl", rows)
    golds = {r["answer"].rpartition("#### ")[2] for r in rows + gsm8k_rows(20, seed=1)}
    found = gsm8k(train, gsm8k_files[1], "policy.max_seq_len=128", "reward=math")
    assert found == [
        f"{train}, row 9: the gold answer 'lots' does not parse as math for reward=math (1 of {len(golds)} "
        "distinct gold answers do not); fix the rows or task.answer_extractor"
    ], found
    assert gsm8k(*gsm8k_files, "policy.max_seq_len=128", "reward=math") == []


@pytest.mark.parametrize("budget", [1, 3])
def test_a_budget_no_gold_answer_fits_says_why_every_gradient_is_0(budget):
    # reverse's answers are 3 to 8 characters, plus EOS. Was: a run whose report said to raise optim.mu (2).
    assert problems(f"rollout.max_new_tokens={budget}") == [
        f"rollout.max_new_tokens={budget}: the shortest gold answer takes 4 tokens with its EOS, so every "
        "completion is cut off, scores at most reward.truncated_max=0, and every advantage and gradient is 0; "
        "raise rollout.max_new_tokens to at least 4 (or set reward.truncated_max=null)"
    ]
    assert problems(f"rollout.max_new_tokens={budget}", "reward.truncated_max=null") == []
    assert problems("rollout.max_new_tokens=4") == []


def test_jsonl_places_are_lines(tmp_path):
    data = tmp_path / "t.jsonl"
    data.write_text("\n".join(json.dumps({"prompt": f"{i}=", "answer": str(i)}) for i in range(20)) + "\n")
    [line] = problems("task=jsonl", f"task.path={data}", "task.num_validation=4", "policy.max_seq_len=5")
    assert "prompts of up to 4 tokens plus rollout.max_new_tokens=8 need 12" in line
    assert f"(the longest prompt: {data}, line 11)" in line


# --- the command line: one line, exit 2, no traceback, no run.json -----------------------------------------
def _refused_in_one_line(proc, *names: str) -> str:
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
    head = "twinkle_exp: 1 problem(s) in the config:"
    assert head in lines, lines
    lines = lines[lines.index(head) :]  # before it: datasets' progress bars reading a file, if any
    assert len(lines) == 2, lines
    assert all(name in lines[1] for name in names), lines
    return lines[1]


@pytest.mark.slow
def test_the_cli_refuses_the_readme_gsm8k_command_with_the_built_in_policy_in_one_line(run_cli, tmp_path):
    write_jsonl(tmp_path / "train.jsonl", gsm8k_rows(60))
    write_jsonl(tmp_path / "test.jsonl", gsm8k_rows(20, seed=1))
    proc = run_cli("task=gsm8k", "task.path=train.jsonl", "task.validation_path=test.jsonl")
    _refused_in_one_line(proc, "policy.max_seq_len=64", "train.jsonl, row ")
    assert not list(tmp_path.glob("outputs/*/*/run.json"))


@pytest.mark.slow
def test_the_cli_refuses_a_50_mb_line_quickly_without_a_run_json(run_cli, tmp_path):
    # Was: the warm-start ran out of memory, leaving run.json "running".
    lines = [json.dumps({"prompt": f"{i}+1=", "answer": str(i + 1)}) for i in range(40)]
    lines[5] = json.dumps({"prompt": "a" * 50_000_000, "answer": "1"})
    (tmp_path / "huge.jsonl").write_text("\n".join(lines) + "\n")
    proc = run_cli("task=jsonl", "task.path=huge.jsonl", "task.num_validation=4", timeout=300)
    _refused_in_one_line(proc, "prompts of at least 1000001 tokens", "huge.jsonl, line 6")
    assert not list(tmp_path.glob("outputs/*/*/run.json"))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("overrides", "names"),
    [
        (["seed=-1"], ["seed must be an integer from 0 to 4294967295"]),
        (["policy=hf", "policy.name_or_path=/no/such/model"], ["policy.name_or_path='/no/such/model'"]),
        (["rollout.max_new_tokens=1"], ["rollout.max_new_tokens=1", "every advantage and gradient is 0"]),
    ],
)
def test_the_cli_refuses_bad_seeds_models_and_budgets_in_one_line(overrides, names, run_cli, tmp_path):
    _refused_in_one_line(run_cli(*overrides), *names)
    assert not list(tmp_path.glob("outputs/*/*/run.json"))


@pytest.mark.slow
def test_gsm8k_trains_with_the_built_in_policy_when_its_prompts_fit(run_cli, tmp_path):
    write_jsonl(tmp_path / "train.jsonl", gsm8k_rows(60))
    write_jsonl(tmp_path / "test.jsonl", gsm8k_rows(20, seed=1))
    args = ["task=gsm8k", "task.path=train.jsonl", "task.validation_path=test.jsonl", "policy.max_seq_len=96"]
    proc = run_cli(*args, "debug=fast", "logger=csv")
    assert proc.returncode == 0, proc.stderr[-3000:]
    [status] = tmp_path.glob("outputs/*/*/run.json")
    assert json.loads(status.read_text())["status"] == "finished"
