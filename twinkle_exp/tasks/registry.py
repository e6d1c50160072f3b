"""The tasks by name: every module under `twinkle_exp/tasks/` and the user's plug-in modules register theirs.

    @register_task
    class MyTask(ProceduralTask):     # one file: its settings are its dataclass fields, with their defaults
        name = "mine"
        ...

`tasks()` imports the built-in task modules, then the modules `TWINKLE_EXP_PLUGINS` names
(`twinkle_exp.plugins`), and returns the table. The `task` config group, `--help` and the suite sweeps read
it: a task of the user's own with no yaml of its own is a `task=<name>` option with its class's defaults.
"""

from __future__ import annotations

from twinkle_exp import plugins

TASKS: dict[str, type] = {}  # name -> task class, in registration order; filled by `tasks()`


def register_task(cls: type) -> type:
    """Class decorator: register the task `cls` under `cls.name`, its `task=` option."""
    if not isinstance(cls.__dict__.get("name"), str):
        raise TypeError(f"{cls.__name__} needs a class attribute `name`, the name of its `task=` option")
    if cls.name in TASKS and TASKS[cls.name] is not cls:
        raise ValueError(f"a task named {cls.name!r} is already registered ({TASKS[cls.name].__name__})")
    TASKS[cls.name] = cls
    return cls


def tasks() -> dict[str, type]:
    """The registry, with the built-in task modules and the user's plug-in modules imported."""
    plugins.load("twinkle_exp.tasks")
    return TASKS
