"""Small frozen encoders with the stages' contracts (scripts/export_encoder.py), for
tests/scripts/export_encoder_test.sh: each is a few layers whose output shapes follow the
input's dynamic sizes as the real encoders' do."""
import torch


class TinyVae(torch.nn.Module):
    """video [B, 3, T, H, W] -> [B, 48, (T-1)/4+1, H/16, W/16]: the first frame alone and
    groups of 4 after it (Wan2.2's causal layout), 16x16 patches."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.patch = torch.nn.Conv3d(3, 48, kernel_size=(1, 16, 16), stride=(1, 16, 16))
        self.mix = torch.nn.Conv3d(48, 48, kernel_size=1)

    def forward(self, video):
        first = self.patch(video[:, :, :1])
        if video.size(2) == 1:  # the memory frames: the branch a causal VAE takes for one frame
            return self.mix(torch.nn.functional.silu(first))
        rest = self.patch(video[:, :, 1:])
        b, c, t, h, w = rest.shape
        rest = rest.reshape(b, c, t // 4, 4, h, w).mean(3)
        return self.mix(torch.nn.functional.silu(torch.cat([first, rest], 2)))


class TinyText(torch.nn.Module):
    """token_ids [N, 128] -> [N, 128, 32]."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.embed = torch.nn.Embedding(258, 32)
        self.out = torch.nn.Linear(32, 32)

    def forward(self, token_ids):
        return self.out(torch.tanh(self.embed(token_ids)))
