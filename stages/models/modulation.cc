#include "models/modulation.h"

namespace wam::models {
namespace {

// Rows [B, S, D] -> [B, groups, 1, D].
at::Tensor rows_per_group(const at::Tensor& rows, const TokenGroups& layout) {
  const at::Tensor grouped =
      layout.segment_of_group.defined() ? rows.index_select(1, layout.segment_of_group) : rows;
  return grouped.unsqueeze(2);
}

at::Tensor grouped_view(const at::Tensor& x, const TokenGroups& layout) {
  return x.reshape({x.size(0), layout.groups, -1, x.size(2)});
}

}  // namespace

at::Tensor modulate(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale,
                    const TokenGroups& layout) {
  return at::addcmul(rows_per_group(shift, layout), grouped_view(x, layout),
                     rows_per_group(1 + scale, layout))
      .view(x.sizes());
}

at::Tensor gated(const at::Tensor& x, const at::Tensor& gate, const TokenGroups& layout) {
  return (grouped_view(x, layout) * rows_per_group(gate, layout)).view(x.sizes());
}

}  // namespace wam::models
