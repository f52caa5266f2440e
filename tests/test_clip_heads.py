"""Zero-shot CLIP heads: the CLIP paper's curated class names and 80-prompt ensemble by default
(``clip-paper``), torchvision's names selectable (``plain-names``), the head part of the model's
identity. A tiny randomly initialised open_clip model built here (no weights are downloaded); only
the tokenizer is replaced by a fast stand-in that records the prompts (open_clip's BPE tokenizer
takes ~10 s for the 80,000 prompts)."""
from __future__ import annotations

import json
import zlib

import pytest

torch = pytest.importorskip("torch")
open_clip = pytest.importorskip("open_clip")

from open_clip.zero_shot_metadata import IMAGENET_CLASSNAMES, OPENAI_IMAGENET_TEMPLATES

from shiftbench.analysis.recipes import DEFAULTS, REGISTRY
from shiftbench.errors import ConfigError
from shiftbench.models import load_model
from shiftbench.models.builtin import imagenet_class_names
from shiftbench.models.open_clip_source import DEFAULT_HEAD, HEADS

ARCH = "shiftbench-tiny-clip"
CONTEXT = 12
CONFIG = {"embed_dim": 8,
          "vision_cfg": {"image_size": 32, "layers": 1, "width": 16, "head_width": 8, "patch_size": 16},
          "text_cfg": {"context_length": CONTEXT, "vocab_size": 49408, "width": 8, "heads": 2, "layers": 1}}


def fast_tokenizer(texts):
    """Start token, one id per word (crc32 below the end token), end token: the text tower pools at
    the largest id, the end token, as with open_clip's tokenizer."""
    rows = []
    for t in ([texts] if isinstance(texts, str) else texts):
        ids = [49406] + [zlib.crc32(w.encode()) % 49000 for w in t.split()][:CONTEXT - 2] + [49407]
        rows.append(ids + [0] * (CONTEXT - len(ids)))
    return torch.tensor(rows)


@pytest.fixture(scope="module")
def tiny_clip(tmp_path_factory):
    path = tmp_path_factory.mktemp("open_clip") / f"{ARCH}.json"
    path.write_text(json.dumps(CONFIG))
    open_clip.add_model_config(str(path))
    mp = pytest.MonkeyPatch()
    calls: list[list[str]] = []

    def get_tokenizer(arch, **kwargs):
        def tok(texts):
            calls.append(list(texts))
            return fast_tokenizer(texts)
        return tok

    mp.setattr(open_clip, "get_tokenizer", get_tokenizer)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)      # tiny matrices: threads only contend (4x slower on a busy machine)
    built = {}
    try:
        for spec in (f"open_clip:{ARCH}", f"open_clip:{ARCH}+plain-names"):
            calls.clear()
            torch.manual_seed(0)
            built[spec] = (load_model(spec, pretrained=False), [t for c in calls for t in c], [len(c) for c in calls])
    finally:
        torch.set_num_threads(threads)
    yield built
    mp.undo()


def test_the_heads_match_the_registry():
    assert set(HEADS) == set(REGISTRY["clip-head"]) and DEFAULT_HEAD == DEFAULTS["clip-head"] == "clip-paper"
    assert REGISTRY["clip-head"]["plain-names"][1].startswith("shiftbench's variant")
    assert "Radford et al. 2021" in REGISTRY["clip-head"]["clip-paper"][1]


def test_default_head_averages_the_80_paper_prompts_over_the_curated_names(tiny_clip):
    model, texts, batches = tiny_clip[f"open_clip:{ARCH}"]
    assert len(OPENAI_IMAGENET_TEMPLATES) == 80 and len(texts) == 1000 * 80
    assert set(batches) == {50 * 80}                       # 50 classes of 80 prompts per text batch
    assert texts[:80] == [t("tench") for t in OPENAI_IMAGENET_TEMPLATES]
    assert texts[517 * 80] == OPENAI_IMAGENET_TEMPLATES[0](IMAGENET_CLASSNAMES[517]) == "a bad photo of a construction crane."
    assert texts[638 * 80 + 1] == "a photo of many tights."
    # the class's weight is the normalised mean of its 80 normalised prompt embeddings
    clip = model.module.net.clip
    with torch.no_grad():
        emb = clip.encode_text(fast_tokenizer(texts[517 * 80:518 * 80]), normalize=True).mean(dim=0)
    weight = model.module.net.classifier[:, 517]
    assert torch.allclose(weight, emb / emb.norm(), atol=1e-5)
    assert model.metadata["zero_shot_head"] == "clip-paper" and model.metadata["prompt_templates"] == "openai-imagenet-80"


def test_plain_names_head_uses_torchvision_names_and_is_another_model(tiny_clip):
    paper, _, _ = tiny_clip[f"open_clip:{ARCH}"]
    plain, texts, _ = tiny_clip[f"open_clip:{ARCH}+plain-names"]
    names = imagenet_class_names()
    assert texts[517 * 80] == "a bad photo of a crane." and texts[::80] == [f"a bad photo of a {n}." for n in names]
    a, b = paper.module.net.classifier, plain.module.net.classifier
    same = [i for i in range(1000) if names[i] == IMAGENET_CLASSNAMES[i]]
    differ = [i for i in range(1000) if names[i] != IMAGENET_CLASSNAMES[i]]
    assert len(differ) == 362
    assert torch.allclose(a[:, same], b[:, same], atol=1e-6)              # same encoder, same seed
    assert (a[:, differ] - b[:, differ]).abs().amax(dim=0).min() > 1e-4   # every renamed class changes
    assert paper.name == f"{ARCH}@untrained" and plain.name == f"{ARCH}@untrained+plain-names"
    assert paper.fingerprint.endswith("+head:clip-paper") and plain.fingerprint.endswith("+head:plain-names")
    assert paper.fingerprint != plain.fingerprint
    assert paper.class_names == plain.class_names == names             # the label space is torchvision's


def test_an_unknown_head_is_a_one_line_error_with_the_closest():
    with pytest.raises(ConfigError, match="unknown zero-shot head 'plain'; did you mean 'plain-names'"):
        load_model(f"open_clip:{ARCH}+plain", pretrained=False)
