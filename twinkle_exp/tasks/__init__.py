"""Tasks: prompts with verifiable answers and fixed held-out validation sets, registered by name (`tasks()`,
`registry.register_task`: one file per task, found by package scan, and the user's own plug-in modules)."""

from twinkle_exp.tasks.addition import AdditionTask
from twinkle_exp.tasks.answers import ANSWER_EXTRACTORS, gsm8k_final_answer
from twinkle_exp.tasks.base import Example, ProceduralTask, Task
from twinkle_exp.tasks.gsm8k import GSM8KTask
from twinkle_exp.tasks.hf_dataset import HFDatasetTask
from twinkle_exp.tasks.jsonl import JsonlTask, read_examples
from twinkle_exp.tasks.registry import TASKS, register_task, tasks
from twinkle_exp.tasks.reverse import ReverseTask
from twinkle_exp.tasks.scratchpad import ScratchpadTask
from twinkle_exp.tasks.sort_digits import SortDigitsTask

__all__ = [
    "ANSWER_EXTRACTORS",
    "TASKS",
    "AdditionTask",
    "Example",
    "GSM8KTask",
    "HFDatasetTask",
    "JsonlTask",
    "ProceduralTask",
    "ReverseTask",
    "ScratchpadTask",
    "SortDigitsTask",
    "Task",
    "gsm8k_final_answer",
    "read_examples",
    "register_task",
    "tasks",
]
