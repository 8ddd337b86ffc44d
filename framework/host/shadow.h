// Shadow events (upstream's, COMPAT §8): rows that keep a dump whole when
// collection saw only part of a block's life, so that every allocation_id
// has one MALLOC and one FREE and the running `used` per pool adds up
// (upstream's test/smoke/src/utils/dump_csv_check.py):
//  * a block that exists when collection starts is written then as MALLOC
//    with Attr shadow:true (the Python package reports the tensors that
//    exist at start(); see bindings/src/module.cpp);
//  * a block still live at the end gets a FREE with shadow:true, written to
//    the sinks only: analyzers (leaks) still see it live;
//  * a block whose address is allocated again without a FREE in between was
//    released unseen: it gets a shadow FREE just before the new MALLOC.
// Shadow rows carry allocation_id, addr, size and shadow:true, no total or
// used. A FREE of a block never seen allocated is not written (upstream
// filters such frees as well): it would pair with nothing.
#pragma once

#include <cstdint>

#include "record.h"

namespace msms {

// A FREE with shadow:true of a block (allocation_id, ptr, size) of pool
// `type` on the device, at time ts. mapping: the block is a mapping of
// memory another block holds (its MALLOC said Attr virtual:true, cuMemMap);
// the FREE says so too (virtual:true), since a shadow row carries no
// device_used and the views count a device's bytes by that Attr. image_ended:
// the process image ended with the block live (exec, or _exit after fork)
// and its memory went with it (Attr image_ended:true): no leak, but live
// when the image ended.
Record shadow_free(uint16_t dev_kind, int16_t dev_id, uint16_t type, uint64_t ptr, uint64_t allocation_id,
                   uint64_t size, uint64_t ts, uint32_t pid, bool mapping, bool image_ended = false);
// Whether the source marked the event a shadow (Attr shadow:true).
bool is_shadow(const Record& r);
// A shadow FREE saying the image ended with the block (Attr image_ended:true).
bool is_image_ended_free(const Record& r);
// A shadow MALLOC of the imports' heap, the host blocks Python imports made
// (Attr shadow:true and import:true: framework/agent/import_fold.h).
bool is_import_shadow(const Record& r);
// The blocks an import shadow stands for (its Attr blocks; 1 without).
uint64_t import_shadow_blocks(const Record& r);

}  // namespace msms
