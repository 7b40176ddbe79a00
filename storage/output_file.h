// The rules a tool's output files are written by, whatever the user named:
// a regular file is replaced atomically (written to PATH.tmp, synced,
// renamed), a link written through, a device, a FIFO or a descriptor
// (/dev/stdout) written in place; what cannot be written is refused before
// anything is; an output that would overwrite what the command reads is
// refused by name. And the standard streams a tool starts with.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace shardkit {

// For a tool's main, first thing: a standard stream (fd 0-2) that was closed
// gets /dev/null, so that no file the tool opens takes its number (a closed
// stderr would put error messages into a shard); an output named
// /dev/stdout or /dev/stderr whose stream was closed is then refused.
void ReserveStandardStreams();
// Which of fds 0-2 were closed then (bit fd), here or in the launcher that
// started this process.
unsigned ClosedStandardStreams();
// Writes an output file the user named: `data` goes to path.tmp, is fsynced and
// renamed over path, then the directory is fsynced. A symbolic link is written
// through (its target is replaced, the link stays); so are a character device
// and a FIFO with a reader (/dev/null: written in place, a write error such as
// /dev/full's reported), and a descriptor named by number (/dev/stdout,
// /dev/stderr, /dev/fd/N, /proc/self/fd/N: written to that descriptor, which
// may be a pipe or a file opened for appending). A directory, a block device, a socket
// or a FIFO without a reader is refused before anything is written.
Status WriteOutputFile(const std::string& path, std::string_view data);
// OK unless writing the output file `output` would change what a tool is
// reading: `output` is one of `inputs` (the same file, by device and inode,
// through any link) or lies inside an input that is a directory (a dataset),
// or is one of such a directory's files by another name (a hard link, a shard
// that is a link to another dataset's). An input that does not exist (a file the command writes
// too) clashes when it is the same path. Remote inputs (URLs) are skipped. The error names both:
// "OUT: is inside IN, which this command reads; write it elsewhere".
Status CheckOutputOutsideInputs(const std::string& output, const std::vector<std::string>& inputs);
// OK if `dir` can hold outputs: an existing directory, or a path that does not
// exist yet (created later); otherwise an error naming it and what it is.
Status CheckOutputDir(const std::string& dir);
// OK if `path` can be written as an output file: it does not exist, or names
// (through links) a regular file, a character device or a FIFO; and its
// directory exists. Otherwise an error naming it. Writes nothing.
Status CheckOutputFile(const std::string& path);
// For writers that need a regular file (HDF5): the path writing `path` lands
// on, links followed, when it does not exist or is a regular file; otherwise
// an error naming it.
Result<std::string> ResolveRegularOutput(const std::string& path);

}  // namespace shardkit
