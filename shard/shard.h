// The public header of the shard module: the record format (writer, reader)
// and datasets (manifest, publish protocol, verification). Status, files and
// checksums are base/'s; include those headers where they are used.
#pragma once

#include "shard/dataset.h"
#include "shard/dataset_writer.h"
#include "shard/manifest.h"
#include "shard/parts.h"
#include "shard/shard_format.h"
#include "shard/shard_reader.h"
#include "shard/shard_writer.h"
