"""Tasks: prompts with verifiable answers and fixed held-out validation sets, by name in `TASKS`."""

from twinkle_exp.tasks.addition import AdditionTask
from twinkle_exp.tasks.base import Example, ProceduralTask, Task
from twinkle_exp.tasks.jsonl import JsonlTask, read_examples
from twinkle_exp.tasks.reverse import ReverseTask
from twinkle_exp.tasks.sort_digits import SortDigitsTask

TASKS: dict[str, type[Task]] = {
    "addition": AdditionTask,
    "reverse": ReverseTask,
    "sort_digits": SortDigitsTask,
    "jsonl": JsonlTask,
}

__all__ = [
    "TASKS",
    "AdditionTask",
    "Example",
    "JsonlTask",
    "ProceduralTask",
    "ReverseTask",
    "SortDigitsTask",
    "Task",
    "read_examples",
]
