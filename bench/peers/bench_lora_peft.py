# LoRA finetuning throughput with Hugging Face transformers + PEFT (the libraries dtrain's users
# come from): LlamaForCausalLM (56M: dim 512, 8 layers, 8 heads, 4 kv heads, ffn 1408, vocab
# 32000), LoraConfig(r, alpha 16, q_proj and v_proj), AdamW over the adapters, random tokens.
# --model DIR loads a Hugging Face folder instead (bench/eval_llama8b.sh: the 8B-shaped one, its
# bf16 weights as stored), --targets/--alpha set the adapters and --grad_ckpt 1 turns on
# gradient checkpointing (recompute), as the 8B run trains. The adapters are f32 over a bf16
# base (as dtrain's are). Prints tok_per_s= (median step) like the other peers.
import argparse, statistics, time, torch
from transformers import LlamaConfig, LlamaForCausalLM
from peft import LoraConfig, get_peft_model
p = argparse.ArgumentParser()
p.add_argument('--threads', type=int, default=2); p.add_argument('--seq', type=int, default=256)
p.add_argument('--batch', type=int, default=8); p.add_argument('--rank', type=int, default=8)
p.add_argument('--steps', type=int, default=4); p.add_argument('--warmup', type=int, default=1)
p.add_argument('--bf16_base', type=int, default=0)
p.add_argument('--model', default=''); p.add_argument('--targets', default='q_proj,v_proj')
p.add_argument('--alpha', type=float, default=16); p.add_argument('--grad_ckpt', type=int, default=0)
a = p.parse_args(); torch.set_num_threads(a.threads); torch.manual_seed(0)
if a.model:
    a.bf16_base = 1
    m = LlamaForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16)
else:
    cfg = LlamaConfig(vocab_size=32000, hidden_size=512, intermediate_size=1408,
                      num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=4,
                      max_position_embeddings=a.seq, tie_word_embeddings=False)
    m = LlamaForCausalLM(cfg)
    if a.bf16_base: m = m.to(torch.bfloat16)
vocab = m.config.vocab_size
if a.grad_ckpt:
    m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    m.enable_input_require_grads()
m = get_peft_model(m, LoraConfig(r=a.rank, lora_alpha=a.alpha, target_modules=a.targets.split(','),
                                 lora_dropout=0.0, task_type="CAUSAL_LM"))
if a.bf16_base:
    for n, q in m.named_parameters():
        if q.requires_grad: q.data = q.data.float()
opt = torch.optim.AdamW([q for q in m.parameters() if q.requires_grad], lr=1e-3, weight_decay=0.1)
ids = torch.randint(0, vocab, (a.batch, a.seq))
def step():
    opt.zero_grad(set_to_none=True)
    m(input_ids=ids, labels=ids).loss.backward()
    opt.step()
for _ in range(a.warmup): step()
ts = []
for _ in range(a.steps):
    t = time.perf_counter(); step(); ts.append(time.perf_counter() - t)
med = statistics.median(ts)
print(f"transformers+peft torch={torch.__version__} lora r={a.rank} {a.targets} seq={a.seq} "
      f"batch={a.batch} bf16_base={a.bf16_base} grad_ckpt={a.grad_ckpt} "
      f"steps_s={','.join(f'{t:.2f}' for t in ts)} median_step_s={med:.3f} "
      f"tok_per_s={a.batch * a.seq / med:.1f}", flush=True)
