"""The built-in VAE stand-in (stages/models/vae.cc, make_builtin_vae) as a PyTorch module, for
exporting one module both ways (scripts/export_encoder.py --torchscript) and timing the two
loaders on the same weights (scripts/exported-vae-bench.sh). Same structure and parameter names
as the C++ stand-in; its weights are seeded here, not the C++ draws.

  video float [B, 3, T, H, W] in [-1, 1], T % 4 == 1, H and W multiples of 16
    -> latent mean [B, 48, (T - 1) / 4 + 1, H / 16, W / 16]

Latent frame 0 depends on video frame 0 only (time is padded on the past side, and the temporal
downsamplings keep the first frame alone), as in Wan2.2.
"""
import torch
import torch.nn.functional as F

LATENT_CHANNELS = 48


class CausalConv3d(torch.nn.Module):
    """Sees the current and past frames only: time zero-padded on the past side."""

    def __init__(self, channels_in: int, channels_out: int, kernel: int):
        super().__init__()
        self.time_pad = kernel - 1
        self.conv = torch.nn.Conv3d(channels_in, channels_out, kernel,
                                    padding=(0, kernel // 2, kernel // 2))

    def forward(self, x):
        return self.conv(F.pad(x, [0, 0, 0, 0, self.time_pad, 0]))


class ResidualBlock(torch.nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv = CausalConv3d(channels, channels, 3)

    def forward(self, x):
        return x + self.conv(F.silu(x))


class TemporalDownsample(torch.nn.Module):
    """T = 1 + 2k -> 1 + k: the first frame alone, later frames merged in pairs."""

    def __init__(self, channels: int):
        super().__init__()
        self.merge = torch.nn.Conv3d(channels, channels, (2, 1, 1), stride=(2, 1, 1))

    def forward(self, x):
        if x.size(2) == 1:
            return x
        return torch.cat([x[:, :, :1], self.merge(x[:, :, 1:])], 2)


def spatial_downsample(channels_in: int, channels_out: int):
    return torch.nn.Conv3d(channels_in, channels_out, (1, 3, 3), stride=(1, 2, 2),
                           padding=(0, 1, 1))


class CausalVideoEncoder(torch.nn.Module):
    latent_channels: torch.jit.Final[int]

    def __init__(self, width: int = 32, seed: int = 0):
        super().__init__()
        self.latent_channels = LATENT_CHANNELS
        generator_state = torch.random.get_rng_state()
        torch.manual_seed(seed)
        self.stem = CausalConv3d(3 * 4, width, 3)
        self.down1 = spatial_downsample(width, 2 * width)
        self.time1 = TemporalDownsample(2 * width)
        self.block1 = ResidualBlock(2 * width)
        self.down2 = spatial_downsample(2 * width, 4 * width)
        self.time2 = TemporalDownsample(4 * width)
        self.block2 = ResidualBlock(4 * width)
        self.down3 = spatial_downsample(4 * width, 4 * width)
        self.block3 = ResidualBlock(4 * width)
        self.head = CausalConv3d(4 * width, 2 * LATENT_CHANNELS, 3)
        torch.random.set_rng_state(generator_state)

    def forward(self, video):
        # Space-to-depth 2x2 (Wan2.2's patchify): [B, 3, T, H, W] -> [B, 12, T, H/2, W/2].
        b, t, h, w = video.size(0), video.size(2), video.size(3), video.size(4)
        x = video.reshape(b, 3, t, h // 2, 2, w // 2, 2).permute(0, 1, 4, 6, 2, 3, 5)
        x = self.stem(x.reshape(b, 12, t, h // 2, w // 2))
        x = self.block1(self.time1(self.down1(F.silu(x))))
        x = self.block2(self.time2(self.down2(F.silu(x))))
        x = self.block3(self.down3(F.silu(x)))
        return self.head(F.silu(x))[:, :self.latent_channels]  # the mean; the log-variance unused
