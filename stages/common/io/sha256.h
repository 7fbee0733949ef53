// SHA-256 digests as lowercase hex, for every checksum of the tree (latent store shards, manifests
// and catalog entries, contract fingerprints, weight files, text-cache keys), through OpenSSL.
#pragma once

#include <string>
#include <string_view>

namespace wam {

std::string sha256_hex(std::string_view bytes);
// The digest of a file's bytes, read in 1 MiB pieces. Throws wam::Error naming the path.
std::string sha256_file_hex(const std::string& path);

}  // namespace wam
