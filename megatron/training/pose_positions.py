"""PoSE position ids (Zhu et al., 2023, "PoSE: Efficient Context Window Extension of LLMs via Positional
Skip-wise Training", arXiv 2309.10400): a training sequence of length L is cut into N chunks, and each chunk's
positions are shifted by a skip, so that a model trained on L tokens sees the distances of a target window
L_t > L. The paper's rule: chunk i holds positions st_i .. st_i + l_i - 1 with st_i = l_0 + .. + l_{i-1} + u_i,
u_0 = 0 and u_i drawn uniformly from {u_{i-1}, .., L_t - L}; so the skips never shrink and the last position is
at most L_t - 1. The chunk lengths come from N - 1 distinct cut points drawn uniformly from {1, .., L - 1}
(every chunk holds at least one token).

As random-positions, one draw per micro-batch, shared by its sequences, from torch's CPU generator: the run's
seed fixes the draws, and a checkpoint keeps the generator's state, so a resumed run draws what the
uninterrupted one would have. Validation, evaluation and generation use 0..L-1."""
import torch


def draw_pose_positions(length: int, target: int, chunks: int, device) -> torch.Tensor:
    """Positions [length] (LongTensor on `device`) of one PoSE draw: `chunks` chunks of consecutive positions
    with non-decreasing skips, the last position below `target`."""
    cuts = (torch.randperm(length - 1)[:chunks - 1] + 1).sort().values  # chunk starts after the first
    room = target - length  # the largest skip
    skips = [0]
    for _ in range(chunks - 1):
        skips.append(int(torch.randint(skips[-1], room + 1, ())))
    chunk_of = torch.zeros(length, dtype=torch.long)
    chunk_of[cuts] = 1
    chunk_of = chunk_of.cumsum(0)  # which chunk each token is in
    return (torch.arange(length) + torch.tensor(skips)[chunk_of]).to(device)
