// Fuzz targets: each takes arbitrary bytes and must never crash, hang, or
// allocate without bound. Used by libFuzzer (tests/fuzz/fuzz_main_*.cc,
// scripts/fuzz.sh) and by fuzz_regression_test, which replays the checked-in
// seed corpus and every crash ever found.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shardkit::fuzz {

int ShardReader(const uint8_t* data,
                size_t size);                    // open a shard file, read every block and record
int Manifest(const uint8_t* data, size_t size);  // parse manifest.json
int Idx(const uint8_t* data, size_t size);  // parse IDX bytes and read them as a (maybe gzip) file
int JpegTransform(const uint8_t* data,
                  size_t size);  // the loader's JPEG decode + crop + resample path, and PNG
int Hdf5Import(const uint8_t* data,
               size_t size);  // structure-aware: bytes shape an HDF5 file, then import it
int MetaMat(const uint8_t* data, size_t size);    // read a devkit's meta.mat (libmatio)
int Mat(const uint8_t* data, size_t size);        // pack a level 5 .mat file's X and y (libmatio)
int Archive(const uint8_t* data, size_t size);    // pack an archive as a tree and as WebDataset
int ValLabels(const uint8_t* data, size_t size);  // a val CSV; a shard brace pattern

}  // namespace shardkit::fuzz
