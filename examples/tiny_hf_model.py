"""Save a small, randomly initialized Hugging Face GPT-2 (with a word-level tokenizer over the embedded
corpus's words) to a folder, so `nanolm lens FOLDER` and `nanolm probe FOLDER` can be tried on a
Hugging Face model without downloading anything:

    python examples/tiny_hf_model.py hf-tiny
    nanolm lens hf-tiny -p "two plus two equals" --plot hf-lens.png

Its weights are random: the point is the plumbing (forward hooks on an unchanged Hugging Face model),
not what it predicts. Needs the `hf` extra (transformers)."""

import argparse

import torch
import transformers
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace

from nanolm.corpus import corpus_words


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    args = parser.parse_args()
    transformers.utils.logging.disable_progress_bar()
    words = ["<unk>", "<bos>", *corpus_words()]
    core = Tokenizer(WordLevel({w: i for i, w in enumerate(dict.fromkeys(words))}, unk_token="<unk>"))
    core.pre_tokenizer = Whitespace()
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", bos_token="<bos>")
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=len(tokenizer), n_positions=64, n_embd=64, n_layer=2, n_head=2,
                                     bos_token_id=1, eos_token_id=1)
    transformers.GPT2LMHeadModel(config).save_pretrained(args.folder)
    tokenizer.save_pretrained(args.folder)
    print(f"a random GPT-2 ({config.n_layer} layers, d={config.n_embd}) and its tokenizer saved to {args.folder}")


if __name__ == "__main__":
    main()
