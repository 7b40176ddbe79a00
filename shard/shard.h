// The public header of the shard module: the record format (writer, reader),
// datasets (manifest, publish protocol, verification) and their Status type.
#pragma once

#include "shard/crc32c.h"
#include "shard/dataset.h"
#include "shard/dataset_writer.h"
#include "shard/file_io.h"
#include "shard/manifest.h"
#include "shard/shard_format.h"
#include "shard/shard_reader.h"
#include "shard/shard_writer.h"
#include "shard/status.h"
#include "shard/system.h"
