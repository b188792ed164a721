// CRC-32C (Castagnoli polynomial, as in iSCSI, ext4 and LevelDB): the checksum of checkpoint files.
//
// Uses the SSE4.2 crc32 instruction when the CPU has it (about 8 bytes per cycle, so checking a
// multi-GB checkpoint costs little next to reading it) and a byte table otherwise. Both give the
// same values; crc32c("123456789") == 0xE3069283.
//
//   uint32_t crc = crc32c_extend(0, header, header_bytes);   // start from 0
//   crc = crc32c_extend(crc, data, data_bytes);              // == crc32c of header + data
#pragma once

#include <cstddef>
#include <cstdint>

namespace trainrt {

// The CRC-32C of (the bytes that gave `crc`) followed by data[0, n).
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n);

// The portable byte-table version of crc32c_extend (exposed so tests can compare the two paths).
uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t n);

}  // namespace trainrt
