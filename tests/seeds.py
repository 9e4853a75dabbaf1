# ruff: noqa: E501, F841
"""THE REFERENCE: the seed tutorials' attention code, copied from ../shared/seeds/ (beside the repository root).

Do not "fix" anything here. These classes are what attnviz.core must reproduce; a bug in the
seed (NaN for fully-masked rows, the unused `original` in generate_mask, dropout rescaling the
weights) is part of the behaviour under test. Only these changes were made, none to the maths:

- each class is renamed with its seed's number (seed 000 and seed 001 both define
  CrossAttention), e.g. CrossAttention -> Seed000CrossAttention;
- seed 001 reached us with its whitespace stripped (`importtorch`, `classSelfAttention`, lost
  indentation); spaces and indentation are restored, trailing blanks dropped;
- the imports of the three files are gathered here (seed 002's unused `numpy` is left out);
- the demo scripts' top-level code is wrapped in functions (`seed000_script`,
  `seed002_script`) instead of running at import time; their bodies are otherwise verbatim.
"""

import math

import torch
import torch.nn as nn
from torch.nn import functional as F

# ---------------------------------------------------------------------------------------------
# Seed 000: 手撕交叉注意力机制 (000_f36c98d25a4d9996.txt)
# ---------------------------------------------------------------------------------------------


class Seed000CrossAttention(nn.Module):
    def __init__(self, d_in, d_out, dropout, num_heads, qkv_bias=False):
        super().__init__()
        assert d_out % num_heads == 0, "d_out 必须能够被 num_heads 整除"

        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads  # 每个头的维度

        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)  # 查询的线性变换
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)    # 键的线性变换
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)  # 值的线性变换
        self.out_proj = nn.Linear(d_out, d_out)               # 输出的线性变换
        self.dropout = nn.Dropout(dropout)                    # Dropout层

    def forward(self, queries, keys, values, mask=None):
        """
        queries: (batch_size, seq_len_q, d_in)
        keys: (batch_size, seq_len_kv, d_in)
        values: (batch_size, seq_len_kv, d_in)
        mask: (batch_size, num_heads, seq_len_q, seq_len_kv) 或 None
        """
        b, seq_len_q, d_in = queries.shape
        _, seq_len_kv, _ = keys.shape

        # 线性变换
        queries = self.W_query(queries)  # (b, seq_len_q, d_out)
        keys = self.W_key(keys)          # (b, seq_len_kv, d_out)
        values = self.W_value(values)    # (b, seq_len_kv, d_out)

        # 重塑为多头形式
        queries = queries.view(b, seq_len_q, self.num_heads, self.head_dim).transpose(1, 2)  # (b, num_heads, seq_len_q, head_dim)
        keys = keys.view(b, seq_len_kv, self.num_heads, self.head_dim).transpose(1, 2)      # (b, num_heads, seq_len_kv, head_dim)
        values = values.view(b, seq_len_kv, self.num_heads, self.head_dim).transpose(1, 2)  # (b, num_heads, seq_len_kv, head_dim)

        # 计算注意力得分
        attn_scores = torch.matmul(queries, keys.transpose(-2, -1))  # (b, num_heads, seq_len_q, seq_len_kv)
        attn_scores = attn_scores / (self.head_dim ** 0.5)            # 缩放

        # 应用mask（如果提供）
        if mask is not None:
            attn_scores = attn_scores.masked_fill(mask == 0, float('-inf'))

        # 计算注意力权重
        attn_weights = torch.softmax(attn_scores, dim=-1)            # (b, num_heads, seq_len_q, seq_len_kv)
        attn_weights = self.dropout(attn_weights)                   # Dropout

        # 计算上下文向量
        context_vec = torch.matmul(attn_weights, values)            # (b, num_heads, seq_len_q, head_dim)
        context_vec = context_vec.transpose(1, 2).contiguous()      # (b, seq_len_q, num_heads, head_dim)
        context_vec = context_vec.view(b, seq_len_q, self.d_out)    # (b, seq_len_q, d_out)

        # 输出投影
        context_vec = self.out_proj(context_vec)                    # (b, seq_len_q, d_out)

        return context_vec


def seed000_script():
    """Seed 000's demo script, verbatim (it seeds itself); returns the `output` it prints."""
    # 设置随机种子以确保结果可复现
    torch.manual_seed(123)

    # 模拟查询和键值序列 (batch_size, seq_len_q/kv, d_in)
    batch_size = 3
    seq_len_q = 5  # 查询序列长度
    seq_len_kv = 7  # 键和值的序列长度
    d_in = 10      # 输入维度
    d_out = 8      # 输出维度
    num_heads = 2  # 多头数量
    dropout = 0.1  # dropout 概率

    # 创建 CrossAttention 实例
    cross_attention = Seed000CrossAttention(d_in, d_out, dropout, num_heads)

    # 输入的随机张量
    queries = torch.randn(batch_size, seq_len_q, d_in)
    keys = torch.randn(batch_size, seq_len_kv, d_in)
    values = torch.randn(batch_size, seq_len_kv, d_in)

    # 如果需要应用mask，例如因果遮蔽，可以创建mask
    # 这里我们创建一个全1的mask，不进行遮蔽
    mask = torch.ones(batch_size, num_heads, seq_len_q, seq_len_kv)

    # 调用 forward 函数，输出上下文向量
    output = cross_attention(queries, keys, values, mask=mask)

    # 输出上下文向量的形状和内容
    print("上下文向量的形状:", output.shape)
    print("上下文向量 (context vectors):")
    print(output)
    return output


# ---------------------------------------------------------------------------------------------
# Seed 001: attention.py (001_46c3660209133439.txt), whitespace restored
# ---------------------------------------------------------------------------------------------


class Seed001SelfAttention(nn.Module):
    '''
     n_heads(int): 注意力头的数量。将输入的嵌入维度分成多个头，每个头独立计算注意力。
     d_embed(int): 输入嵌入的维度大小。
     in_proj_bias(bool): 是否在输入投影层中添加偏置项。默认为 True。
     out_proj_bias(bool): 是否在输出投影层中添加偏置项。默认为 True。
     '''

    def __init__(self, n_heads, d_embed, in_proj_bias=True, out_proj_bias=True):
        super().__init__()
        # This combines the Wq, Wk and Wv matrices into one matrix
        # 将输入的嵌入向量线性投影到查询（Query）、键（Key）和值（Value）三个向量。
        # 线性层的输出维度为 3 * d_embed，因为它同时生成 Q、K、V 三个向量。
        self.in_proj = nn.Linear(d_embed, 3 * d_embed, bias=in_proj_bias)

        # This one represents the Wo matrix
        # 将注意力机制输出的结果线性投影回原始的嵌入维度 d_embed。
        self.out_proj = nn.Linear(d_embed, d_embed, bias=out_proj_bias)

        # 注意力头的数量
        self.n_heads = n_heads

        # 每个注意力头的维度大小，计算方式为 d_embed // n_heads
        self.d_head = d_embed // n_heads

    def forward(self, x, causal_mask=False):
        # x: # (Batch_Size, Seq_Len, Dim)
        # 输入 x 的形状: (Batch_Size, Seq_Len, Dim)

        # (Batch_Size, Seq_Len, Dim)
        input_shape = x.shape

        # (Batch_Size, Seq_Len, Dim)
        batch_size, sequence_length, d_embed = input_shape

        # (Batch_Size, Seq_Len, H, Dim / H)
        # 重新调整形状以适应多头注意力
        interim_shape = (batch_size, sequence_length, self.n_heads, self.d_head)

        # (Batch_Size, Seq_Len, Dim) -> (Batch_Size, Seq_Len, Dim * 3) -> 3 tensor of shape (Batch_Size, Seq_Len, Dim)
        # 输入投影：将 x 投影到 Q, K, V
        q, k, v = self.in_proj(x).chunk(3, dim=-1)  # 每个的形状: (Batch_Size, Seq_Len, Dim)

        # (Batch_Size, Seq_Len, Dim) -> (Batch_Size, Seq_Len, H, Dim / H) -> (Batch_Size, H, Seq_Len, Dim / H)
        # 调整 Q, K, V 的形状以适应多头注意力
        q = q.view(interim_shape).transpose(1, 2)
        k = k.view(interim_shape).transpose(1, 2)
        v = v.view(interim_shape).transpose(1, 2)

        # (Batch_Size, H, Seq_Len, Dim / H) @ (Batch_Size, H, Dim / H, Seq_Len) -> (Batch_Size, H, Seq_Len, Seq_Len)
        # 计算注意力权重：Q @ K^T
        weight = q @ k.transpose(-1, -2)

        # 如果使用因果掩码，则将上三角部分设为负无穷
        if causal_mask:
            # Mask where the upper triangle (above the principal diagonal) is 1
            mask = torch.ones_like(weight, dtype=torch.bool).triu(1)  # 上三角为 True
            # Fill the upper triangle with -inf
            # 上三角填充为 -inf
            weight.masked_fill_(mask, -torch.inf)

        # Divide by d_k (Dim / H).
        # (Batch_Size, H, Seq_Len, Seq_Len) -> (Batch_Size, H, Seq_Len, Seq_Len)
        # 缩放注意力权重
        weight /= math.sqrt(self.d_head)

        # (Batch_Size, H, Seq_Len, Seq_Len) -> (Batch_Size, H, Seq_Len, Seq_Len)
        # 应用 softmax 激活函数
        weight = F.softmax(weight, dim=-1)

        # (Batch_Size, H, Seq_Len, Seq_Len) @ (Batch_Size, H, Seq_Len, Dim / H) -> (Batch_Size, H, Seq_Len, Dim / H)
        # 计算注意力输出：weight @ V
        output = weight @ v

        # (Batch_Size, H, Seq_Len, Dim / H) -> (Batch_Size, Seq_Len, H, Dim / H)
        # 调整输出形状
        output = output.transpose(1, 2)

        # (Batch_Size, Seq_Len, H, Dim / H) -> (Batch_Size, Seq_Len, Dim)
        output = output.reshape(input_shape)

        # (Batch_Size, Seq_Len, Dim) -> (Batch_Size, Seq_Len, Dim)
        # 线性投影输出
        output = self.out_proj(output)

        # (Batch_Size, Seq_Len, Dim)
        return output


class Seed001CrossAttention(nn.Module):

    '''
     n_heads(int): 注意力头的数量。
     d_embed(int): 查询(Query)嵌入的维度大小。
     d_cross(int): 键(Key)和值(Value)嵌入的维度大小。
     in_proj_bias(bool): 是否在 Q, K, V 投影层中添加偏置项。默认为 True。
     out_proj_bias(bool): 是否在输出投影层中添加偏置项。默认为 True。
     '''

    def __init__(self, n_heads, d_embed, d_cross, in_proj_bias=True, out_proj_bias=True):
        super().__init__()
        # 将查询序列 x 投影到查询向量 Q，维度为 d_embed
        self.q_proj = nn.Linear(d_embed, d_embed, bias=in_proj_bias)
        # 将上下文序列 y 投影到键向量 K，维度为 d_embed
        self.k_proj = nn.Linear(d_cross, d_embed, bias=in_proj_bias)
        # 将上下文序列 y 投影到值向量 V，维度为 d_embed
        self.v_proj = nn.Linear(d_cross, d_embed, bias=in_proj_bias)
        # 将注意力机制的输出线性投影回原始的嵌入维度 d_embed
        self.out_proj = nn.Linear(d_embed, d_embed, bias=out_proj_bias)
        # 注意力头的数量
        self.n_heads = n_heads
        # 每个注意力头的维度大小，计算方式为 d_embed // n_heads
        self.d_head = d_embed // n_heads

    def forward(self, x, y):
        # x (latent): # (Batch_Size, Seq_Len_Q, Dim_Q)
        # y (context): # (Batch_Size, Seq_Len_KV, Dim_KV) = (Batch_Size, 77, 768)
        # 查询 x 的形状: (Batch_Size, Seq_Len_Q, Dim_Q)
        # 上下文 y 的形状: (Batch_Size, Seq_Len_KV, Dim_KV)

        input_shape = x.shape
        batch_size, sequence_length, d_embed = input_shape
        # Divide each embedding of Q into multiple heads such that d_heads * n_heads = Dim_Q
        # 调整形状以适应多头注意力
        interim_shape = (batch_size, -1, self.n_heads, self.d_head)

        # 投影 Q, K, V
        # (Batch_Size, Seq_Len_Q, Dim_Q) -> (Batch_Size, Seq_Len_Q, Dim_Q)
        q = self.q_proj(x)
        # (Batch_Size, Seq_Len_KV, Dim_KV) -> (Batch_Size, Seq_Len_KV, Dim_Q)
        k = self.k_proj(y)
        # (Batch_Size, Seq_Len_KV, Dim_KV) -> (Batch_Size, Seq_Len_KV, Dim_Q)
        v = self.v_proj(y)

        # 调整 Q, K, V 的形状以适应多头注意力
        # (Batch_Size, Seq_Len_Q, Dim_Q) -> (Batch_Size, Seq_Len_Q, H, Dim_Q / H) -> (Batch_Size, H, Seq_Len_Q, Dim_Q / H)
        q = q.view(interim_shape).transpose(1, 2)
        # (Batch_Size, Seq_Len_KV, Dim_Q) -> (Batch_Size, Seq_Len_KV, H, Dim_Q / H) -> (Batch_Size, H, Seq_Len_KV, Dim_Q / H)
        k = k.view(interim_shape).transpose(1, 2)
        # (Batch_Size, Seq_Len_KV, Dim_Q) -> (Batch_Size, Seq_Len_KV, H, Dim_Q / H) -> (Batch_Size, H, Seq_Len_KV, Dim_Q / H)
        v = v.view(interim_shape).transpose(1, 2)

        # 计算注意力权重：Q @ K^T
        # (Batch_Size, H, Seq_Len_Q, Dim_Q / H) @ (Batch_Size, H, Dim_Q / H, Seq_Len_KV) -> (Batch_Size, H, Seq_Len_Q, Seq_Len_KV)
        weight = q @ k.transpose(-1, -2)

        # (Batch_Size, H, Seq_Len_Q, Seq_Len_KV)
        # 缩放注意力权重
        weight /= math.sqrt(self.d_head)

        # (Batch_Size, H, Seq_Len_Q, Seq_Len_KV)
        # 应用 softmax 激活函数
        weight = F.softmax(weight, dim=-1)

        # (Batch_Size, H, Seq_Len_Q, Seq_Len_KV) @ (Batch_Size, H, Seq_Len_KV, Dim_Q / H) -> (Batch_Size, H, Seq_Len_Q, Dim_Q / H)
        # 计算注意力输出：weight @ V
        output = weight @ v

        # (Batch_Size, H, Seq_Len_Q, Dim_Q / H) -> (Batch_Size, Seq_Len_Q, H, Dim_Q / H)
        # 调整输出形状
        output = output.transpose(1, 2).contiguous()

        # (Batch_Size, Seq_Len_Q, H, Dim_Q / H) -> (Batch_Size, Seq_Len_Q, Dim_Q)
        output = output.view(input_shape)

        # (Batch_Size, Seq_Len_Q, Dim_Q) -> (Batch_Size, Seq_Len_Q, Dim_Q)
        # 线性投影输出
        output = self.out_proj(output)

        # (Batch_Size, Seq_Len_Q, Dim_Q)
        return output


# ---------------------------------------------------------------------------------------------
# Seed 002: 因果注意力（or 掩码注意力）代码实现 (002_0484d2b7c5c82a92.txt)
# ---------------------------------------------------------------------------------------------


class Seed002CausalSelfAttention(nn.Module):
    def __init__(self, hidden_dim, n_heads, dropout=0.0):
        super().__init__()
        self.hidden_dim = hidden_dim
        self.n_heads = n_heads
        self.head_dim = hidden_dim // n_heads
        assert hidden_dim % n_heads == 0, "hidden_dim 必须能被 n_heads 整除"
        self.query = nn.Linear(hidden_dim, hidden_dim)
        self.key = nn.Linear(hidden_dim, hidden_dim)
        self.value = nn.Linear(hidden_dim, hidden_dim)
        self.output = nn.Linear(hidden_dim, hidden_dim)
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x, mask=None):
        q = self.query(x)
        k = self.key(x)
        v = self.value(x)
        return self.get_attention_scores(q, k, v, mask=mask)

    def get_attention_scores(self, q, k, v, mask=None):
        B, L, H = q.shape
        # 重塑张量以适应多头注意力
        q = q.view(B, L, self.n_heads, self.head_dim)
        k = k.view(B, L, self.n_heads, self.head_dim)
        v = v.view(B, L, self.n_heads, self.head_dim)
        # 调整维度顺序以进行批量矩阵乘法
        q = q.permute(0, 2, 1, 3) # (batch_size, num_heads, seq_len, head_dim)
        k = k.permute(0, 2, 1, 3)
        v = v.permute(0, 2, 1, 3)
        # 计算注意力分数
        attention_scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_dim)  # (batch_size, num_heads, seq_len, seq_len)
        if mask is not None:
            attention_scores = attention_scores.masked_fill_(mask==0, float('-inf'))
        # 计算注意力权重
        attention_weights = torch.softmax(attention_scores, dim=-1)
        attention_weights = self.dropout(attention_weights)
        # 计算输出
        out = torch.matmul(attention_weights, v) # (batch_size, num_heads, seq_len, head_dim)
        # 调整维度顺序并重塑回原始形状
        out = out.permute(0, 2, 1, 3).contiguous().view(B, L, H)
        out = self.output(out)
        return out


def seed002_generate_mask(x, causal=False):
    B, L, _ = x.shape
    original = torch.ones((L, L), dtype=torch.bool)
    if causal:
        mask = torch.tril(torch.ones((L, L), dtype=torch.bool)).unsqueeze(0).unsqueeze(0) # [1, 1, seq_len, seq_len]
    else:
        mask = torch.ones((L, L), dtype=torch.bool).unsqueeze(0).unsqueeze(0)  # [1, 1, seq_len, seq_len]
    return mask


def seed002_script(device=None):
    """Seed 002's `if __name__ == "__main__":` body, verbatim; returns the `output` it computes.

    The script does not seed itself: call torch.manual_seed first to make it reproducible.
    `device` overrides the script's own choice (cuda when available) so a test can pin the CPU.
    """
    batch_size = 8
    seq_len = 16
    hidden_dim = 512
    num_heads = 8
    causal = True
    dropout = 0.1
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu") if device is None else torch.device(device)
    # 创建模型实例并移动到目标设备
    model = Seed002CausalSelfAttention(hidden_dim=hidden_dim, n_heads=num_heads, dropout=dropout).to(device)
    # 生成输入张量并移动到目标设备
    x = torch.randn(batch_size, seq_len, hidden_dim).to(device)
    # 生成掩码并移动到目标设备
    if causal:
        mask = seed002_generate_mask(x, causal=True).to(device)
    else:
        mask = seed002_generate_mask(x, causal=False).to(device)
    # 前向传播
    output = model(x, mask=mask)
    print(output.shape)
    return output
