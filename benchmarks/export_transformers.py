"""Export small Hugging Face transformer architectures (random weights) to ONNX for
benchmarks/architectures.py.

    /path/to/torch-venv/bin/python benchmarks/export_transformers.py [--out /tmp/kiln_hf]
                                   [--models bert,gpt2,whisper_enc] [--extra]

Needs torch and transformers (not Kiln's dependencies: run it with a Python that has them;
torchvision is not imported). Each architecture is built from its config class at a reduced
size (2 layers, width 128: no download, random initialisation, seeded), in eval mode with
eager attention, and exported with the TorchScript exporter (opset 17); text models get
dynamic batch and sequence axes, wav2vec2 a dynamic sample count. Then

    python benchmarks/architectures.py --onnx /tmp/kiln_hf --cpu

compares Kiln's default schedules with onnxruntime on them (audio needs
`--dynamic-size 4000`: wav2vec2's feature convs need at least 400 samples).

`--seq N` sets the text models' example length (32); `--static` exports fixed shapes (no
dynamic axes), so architectures.py runs the example's shapes; `--dynamo a,b` exports those
models with torch's dynamo exporter (`dynamo=True`, opset 18, fixed shapes) instead.
`--models` may name models of either set. `<out>/exports.json` records each file's exporter.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

TEXT = ["input_ids", "attention_mask"]
TEXT_AXES = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}


def architectures(T, seq: int = 32):
    """name -> (model, example input shapes by name, dynamic axes)."""
    small = dict(attn_implementation="eager")
    text = {"input_ids": (1, seq), "attention_mask": (1, seq)}
    image = {"pixel_values": (1, 3, 64, 64)}
    return {
        "bert": (lambda: T.BertModel(T.BertConfig(
            vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=512, **small)), text, TEXT_AXES),
        "gpt2": (lambda: T.GPT2Model(T.GPT2Config(
            vocab_size=1000, n_embd=128, n_layer=2, n_head=4, use_cache=False, **small)),
            text, TEXT_AXES),
        "llama": (lambda: T.LlamaModel(T.LlamaConfig(
            vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, use_cache=False, **small)),
            text, TEXT_AXES),
        "t5enc": (lambda: T.T5EncoderModel(T.T5Config(
            vocab_size=1000, d_model=128, num_layers=2, num_heads=4, d_ff=512, d_kv=32,
            **small)), text, TEXT_AXES),
        "bart_enc": (lambda: T.BartModel(T.BartConfig(
            vocab_size=1000, d_model=128, encoder_layers=2, decoder_layers=1,
            encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=256,
            decoder_ffn_dim=256, **small)).encoder, text, TEXT_AXES),
        "deberta": (lambda: T.DebertaV2Model(T.DebertaV2Config(
            vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=256)), text, None),
        "whisper_enc": (lambda: T.WhisperModel(T.WhisperConfig(
            vocab_size=1000, d_model=128, encoder_layers=2, decoder_layers=1,
            encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=256,
            decoder_ffn_dim=256, num_mel_bins=80, max_source_positions=100, pad_token_id=0,
            bos_token_id=1, eos_token_id=2, decoder_start_token_id=1, **small)).encoder,
            {"input_features": (1, 80, 200)}, None),
        "wav2vec2": (lambda: T.Wav2Vec2Model(T.Wav2Vec2Config(
            hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
            conv_dim=(64, 64, 64), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3),
            num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, **small)),
            {"input_values": (1, 4000)}, {"input_values": {1: "samples"}}),
        "hf_vit": (lambda: T.ViTModel(T.ViTConfig(
            image_size=64, patch_size=8, hidden_size=128, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=512, **small)), image, None),
        "clip_vision": (lambda: T.CLIPVisionModel(T.CLIPVisionConfig(
            hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
            image_size=64, patch_size=8, **small)), image, None),
        "swin_hf": (lambda: T.SwinModel(T.SwinConfig(
            image_size=64, patch_size=4, embed_dim=32, depths=[2, 2], num_heads=[2, 4],
            window_size=4, **small)), image, None),
        "mobilevit": (lambda: T.MobileViTModel(T.MobileViTConfig(image_size=64, **small)),
                      image, None),
        "segformer": (lambda: T.SegformerModel(T.SegformerConfig(image_size=64, **small)),
                      image, None),
        "convnext_hf": (lambda: T.ConvNextModel(T.ConvNextConfig(
            image_size=64, hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 2, 1])),
            image, None),
    }


def extra_architectures(T, seq: int = 32):
    """A second set (`--extra`): more encoders (DistilBERT, RoBERTa, ALBERT's shared layers,
    MobileBERT's bottlenecks and NoNorm, ELECTRA, SqueezeBERT's grouped 1-D convs), decoders
    (OPT, BLOOM's ALiBi, GPT-NeoX's and Phi's partial rotary), vision transformers (DeiT,
    BEiT's relative position bias, DINOv2's interpolated position embedding, LeViT) and CNNs
    (PoolFormer, ResNet, MobileNetV2)."""
    small = dict(attn_implementation="eager")
    text = {"input_ids": (1, seq), "attention_mask": (1, seq)}
    image = {"pixel_values": (1, 3, 64, 64)}
    bert_like = dict(vocab_size=1000, hidden_size=128, num_hidden_layers=2,
                     num_attention_heads=4, intermediate_size=512)
    vit_like = dict(image_size=64, patch_size=8, hidden_size=128, num_hidden_layers=2,
                    num_attention_heads=4)
    return {
        "distilbert": (lambda: T.DistilBertModel(T.DistilBertConfig(
            vocab_size=1000, dim=128, n_layers=2, n_heads=4, hidden_dim=512, **small)),
            text, TEXT_AXES),
        "roberta": (lambda: T.RobertaModel(T.RobertaConfig(**bert_like, **small)),
                    text, TEXT_AXES),
        "albert": (lambda: T.AlbertModel(T.AlbertConfig(embedding_size=64, **bert_like,
                                                        **small)), text, TEXT_AXES),
        "mobilebert": (lambda: T.MobileBertModel(T.MobileBertConfig(
            vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=128, embedding_size=64, intra_bottleneck_size=64,
            true_hidden_size=64, num_feedforward_networks=2, **small)), text, TEXT_AXES),
        "electra": (lambda: T.ElectraModel(T.ElectraConfig(embedding_size=64, **bert_like,
                                                           **small)), text, TEXT_AXES),
        "squeezebert": (lambda: T.SqueezeBertModel(T.SqueezeBertConfig(
            embedding_size=128, **bert_like)), text, TEXT_AXES),
        "opt": (lambda: T.OPTModel(T.OPTConfig(
            vocab_size=1000, hidden_size=128, num_hidden_layers=2, ffn_dim=512,
            num_attention_heads=4, word_embed_proj_dim=128, max_position_embeddings=128,
            use_cache=False, **small)), text, TEXT_AXES),
        "bloom": (lambda: T.BloomModel(T.BloomConfig(
            vocab_size=1000, hidden_size=128, n_layer=2, n_head=4, use_cache=False,
            **small)), text, TEXT_AXES),
        "gpt_neox": (lambda: T.GPTNeoXModel(T.GPTNeoXConfig(
            **bert_like, rotary_pct=0.25, use_cache=False, **small)), text, TEXT_AXES),
        "phi": (lambda: T.PhiModel(T.PhiConfig(
            **bert_like, partial_rotary_factor=0.5, use_cache=False, **small)),
            text, TEXT_AXES),
        "deit": (lambda: T.DeiTModel(T.DeiTConfig(**vit_like, intermediate_size=512,
                                                  **small)), image, None),
        "beit": (lambda: T.BeitModel(T.BeitConfig(**vit_like, intermediate_size=512,
                                                  use_relative_position_bias=True, **small)),
                 image, None),
        "dinov2": (lambda: T.Dinov2Model(T.Dinov2Config(**vit_like, **small)), image, None),
        "levit": (lambda: T.LevitModel(T.LevitConfig(image_size=128)),
                  {"pixel_values": (1, 3, 128, 128)}, None),
        "poolformer": (lambda: T.PoolFormerModel(T.PoolFormerConfig(
            hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 2, 1])), image, None),
        "resnet_hf": (lambda: T.ResNetModel(T.ResNetConfig(
            embedding_size=32, hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 1, 1],
            layer_type="bottleneck")), image, None),
        "mobilenet_v2_hf": (lambda: T.MobileNetV2Model(T.MobileNetV2Config(image_size=64)),
                            image, None),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/kiln_hf")
    parser.add_argument("--models", default=None, help="comma-separated (default: all)")
    parser.add_argument("--extra", action="store_true",
                        help="the second set (extra_architectures) instead of the first")
    parser.add_argument("--seq", type=int, default=32, help="text models' example length")
    parser.add_argument("--static", action="store_true", help="no dynamic axes")
    parser.add_argument("--dynamo", default="",
                        help="comma-separated models to export with dynamo=True, opset 18")
    args = parser.parse_args(argv)
    sys.modules["torchvision"] = None   # transformers imports it when present; not needed
    import torch
    import transformers

    class FirstOutput(torch.nn.Module):
        """The model called with keyword inputs, its first output (the hidden states)."""

        def __init__(self, net, names):
            super().__init__()
            self.net, self.names = net, names

        def forward(self, *inputs):
            out = self.net(**dict(zip(self.names, inputs)))
            return out[0]

    torch.manual_seed(0)
    known = (extra_architectures if args.extra else architectures)(transformers, args.seq)
    names = args.models.split(",") if args.models else list(known)
    if args.models:     # a model of either set
        known = {**architectures(transformers, args.seq),
                 **extra_architectures(transformers, args.seq)}
    dynamo = {n for n in args.dynamo.split(",") if n}
    from export_timm import export, record
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; known: {list(known)}")
    os.makedirs(args.out, exist_ok=True)
    failed, done = [], {}
    for name in names:
        build, shapes, axes = known[name]
        path = os.path.join(args.out, f"{name}.onnx")
        start = time.perf_counter()
        try:
            net = build().eval()
            inputs = tuple(torch.ones(s, dtype=torch.long) if n == "attention_mask" else
                           torch.randint(0, 1000, s) if n == "input_ids" else torch.randn(s)
                           for n, s in shapes.items())
            exporter = "dynamo" if name in dynamo else "script"
            with torch.no_grad():
                opset = export(torch, FirstOutput(net, list(shapes)), inputs, path, exporter,
                               list(shapes), None if args.static else axes)
        except Exception as exc:  # report and go on with the others
            failed.append(name)
            print(f"{name}: export failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        done[name] = {"source": f"transformers:{type(net).__name__}", "exporter": exporter,
                      "opset": opset, "input": {n: list(s) for n, s in shapes.items()}}
        print(f"{name}: -> {path} ({exporter}, opset {opset}, "
              f"{os.path.getsize(path) / 2**20:.1f} MB, {time.perf_counter() - start:.1f} s)")
    record(args.out, done)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
