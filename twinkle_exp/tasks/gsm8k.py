"""GSM8K (grade-school math word problems): the question as the prompt, the number after `####` as the answer."""

from __future__ import annotations

from twinkle_exp.tasks.hf_dataset import HFDatasetTask, is_local_file
from twinkle_exp.tasks.registry import register_task

HUB_ID = "openai/gsm8k"


@register_task
class GSM8KTask(HFDatasetTask):
    """GSM8K from the hub (`openai/gsm8k`, subset `main`: train split for training, test split held out) or
    from local files in its format (one `{"question": ..., "answer": "...#### 72"}` per line, as in the
    dataset's GitHub repository): `path=train.jsonl`, and `validation_path=test.jsonl` or a held-out part
    of the training file.
    """

    name = "gsm8k"

    def __init__(
        self,
        path: str = HUB_ID,
        validation_path: str | None = None,
        num_validation: int = 128,
        seed: int = 0,
        prompt_template: str = "{question}",
        chat_template: bool = False,
        system_prompt: str | None = None,
    ):
        local = is_local_file(path)
        super().__init__(
            path,
            prompt_template=prompt_template,
            answer_field="answer",
            answer_extractor="gsm8k",
            subset=None if local else "main",
            split="train",
            # The hub dataset's test split is the held-out set unless a file is given; a file has one split.
            validation_split=None if local or validation_path is not None else "test",
            validation_path=validation_path,
            num_validation=num_validation,
            seed=seed,
            chat_template=chat_template,
            system_prompt=system_prompt,
        )
