"""The model: paged attention (chunked, cached, batched) equals a plain full-sequence forward; checkpoints load."""

import json

import pytest

torch = pytest.importorskip("torch")

from budgetscope.engine.checkpoint import load_checkpoint, save_checkpoint
from budgetscope.engine.engine_config import EngineConfig
from budgetscope.engine.llm_engine import LLMEngine
from budgetscope.engine.model import LlamaForCausalLM
from budgetscope.engine.model_config import CONFIGS, ModelConfig, named_config
from budgetscope.engine.sampling_params import SamplingParams


def dense_greedy(model, prompt, num_tokens):
    """Greedy continuation recomputing the whole sequence each token: no cache at all."""
    ids = list(prompt)
    with torch.inference_mode():
        for _ in range(num_tokens):
            hidden = model(torch.tensor(ids), torch.arange(len(ids)))
            ids.append(int(model.compute_logits(hidden[-1:]).argmax()))
    return ids[len(prompt) :]


def prompts(n, length, seed=0, vocab=256):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (length + 7 * i,), generator=gen).tolist() for i in range(n)]


@pytest.mark.parametrize("chunked,budget", [(True, 16), (True, 512), (False, 512)])
def test_paged_decode_matches_full_forward(chunked, budget):
    engine = LLMEngine(
        EngineConfig(
            model="tiny",
            device="cpu",
            max_num_batched_tokens=budget,
            max_num_seqs=8,
            enable_chunked_prefill=chunked,
            max_model_len=256,
            num_kv_blocks=64,
        )
    )
    batch = prompts(4, 21)
    seqs = engine.generate(batch, SamplingParams(max_tokens=12, temperature=0, ignore_eos=True))
    for prompt, seq in zip(batch, seqs):
        assert seq.output_token_ids == dense_greedy(engine.model, prompt, 12)


def test_paged_logits_match_full_forward_within_tolerance():
    engine = LLMEngine(
        EngineConfig(
            model="tiny", device="cpu", max_num_batched_tokens=8, max_num_seqs=4, num_kv_blocks=32, max_model_len=256
        )
    )
    prompt = prompts(1, 40)[0]
    seq = engine.make_sequence(prompt, SamplingParams(max_tokens=4, temperature=0, ignore_eos=True))
    engine.add(seq)
    while engine.has_work:
        engine.step()
    # Now the cache holds the prompt + 3 outputs; run the last token against it and compare logits.
    from budgetscope.engine.scheduler import ScheduledBatch

    ids = seq.token_ids
    replay = engine.make_sequence(ids[:-1], SamplingParams(max_tokens=1, temperature=0))
    hit = engine.block_manager.match_prefix(replay)
    assert len(hit) == (len(ids) - 2) // 16  # full blocks of the finished sequence are cached
    assert engine.block_manager.allocate(replay, len(ids) - 1, hit)
    replay.num_computed_tokens = len(hit) * 16
    batch = ScheduledBatch()
    batch.add(replay, len(ids) - 1 - replay.num_computed_tokens)
    with torch.inference_mode():
        prep = engine.runner.prepare(batch)
        hidden = engine.model(prep.input_ids, prep.positions, prep, engine.kv_cache.layers)
        paged = engine.model.compute_logits(hidden[-1:])
        full = engine.model.compute_logits(engine.model(torch.tensor(ids[:-1]), torch.arange(len(ids) - 1))[-1:])
    torch.testing.assert_close(paged, full, rtol=1e-4, atol=1e-4)


def test_named_configs_span_tiny_to_1b():
    assert CONFIGS["tiny"].num_parameters < 5e6
    assert 0.9e9 < CONFIGS["1b"].num_parameters < 1.3e9
    with pytest.raises(ValueError, match="known"):
        named_config("nope")


def write_tiny_checkpoint(path, seed=3):
    """A Hugging Face-layout checkpoint: config.json, model.safetensors, tokenizer.json (a trained BPE)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(["the quick brown fox jumps over the lazy dog"] * 50 + ["hello world"] * 50, trainer)
    config = ModelConfig(
        name="ckpt",
        vocab_size=tok.get_vocab_size(),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        bos_token_id=tok.token_to_id("<s>"),
        eos_token_id=[tok.token_to_id("</s>")],
    )
    model = LlamaForCausalLM(config).init_random(seed)
    save_checkpoint(model, path)
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    return model, tok


def test_checkpoint_roundtrip_loads_weights_config_and_tokenizer(tmp_path):
    original, tok = write_tiny_checkpoint(tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    assert raw["model_type"] == "llama" and raw["num_key_value_heads"] == 2
    engine = LLMEngine(EngineConfig(checkpoint=str(tmp_path), device="cpu", max_model_len=128, num_kv_blocks=32))
    assert engine.model_name == tmp_path.name
    assert engine.tokenizer.encode("hello world") == tok.encode("hello world").ids
    assert tok.token_to_id("</s>") in engine.eos_token_ids
    ids = torch.tensor(tok.encode("the quick brown fox").ids)
    with torch.inference_mode():
        want = original.compute_logits(original(ids, torch.arange(len(ids))))
        got = engine.model.compute_logits(engine.model(ids, torch.arange(len(ids))))
    torch.testing.assert_close(got, want)
    seq = engine.generate(["hello world"], SamplingParams(max_tokens=5, temperature=0, ignore_eos=True))[0]
    assert seq.output_token_ids == dense_greedy(original, tok.encode("hello world").ids, 5)


def test_checkpoint_with_missing_weight_is_refused(tmp_path):
    write_tiny_checkpoint(tmp_path)
    config = ModelConfig.from_hf_dir(tmp_path)
    config.num_hidden_layers += 1
    small = LlamaForCausalLM(config)
    with pytest.raises(ValueError, match="missing"):
        load_checkpoint(small, tmp_path)


def test_llama3_rope_scaling_is_accepted():
    cfg = ModelConfig(
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        }
    )
    model = LlamaForCausalLM(cfg).init_random(0)
    assert torch.isfinite(model.model.rotary_emb.cos).all()
    with pytest.raises(ValueError, match="rope_scaling"):
        ModelConfig(rope_scaling={"rope_type": "yarn", "factor": 2.0})
