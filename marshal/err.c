/* err.c — names of the project-wide error codes. */
#include "marshal.h"

static const char *const err_names[DG_ERR__COUNT] = {
	[DG_OK] = "DG_OK: success",
	[DG_ERR_NOMEM] = "DG_ERR_NOMEM: out of memory",
	[DG_ERR_INVAL] = "DG_ERR_INVAL: invalid argument",
	[DG_ERR_NOSPACE] = "DG_ERR_NOSPACE: buffer or arena too small",
	[DG_ERR_STATE] = "DG_ERR_STATE: call out of sequence",
	[DG_ERR_LIMIT] = "DG_ERR_LIMIT: limit exceeded",
	[DG_ERR_CONFLICT] = "DG_ERR_CONFLICT: conflicts with a registered definition",
	[DG_ERR_REFUSED] = "DG_ERR_REFUSED: registration refused",
	[DG_ERR_TRUNCATED] = "DG_ERR_TRUNCATED: input ends inside a value",
	[DG_ERR_BAD_TAG] = "DG_ERR_BAD_TAG: unknown or misplaced tag",
	[DG_ERR_BAD_LENGTH] = "DG_ERR_BAD_LENGTH: inconsistent length or offset",
	[DG_ERR_BAD_VARINT] = "DG_ERR_BAD_VARINT: malformed varint",
	[DG_ERR_DEPTH] = "DG_ERR_DEPTH: nesting too deep",
	[DG_ERR_COUNT] = "DG_ERR_COUNT: element count larger than the input",
	[DG_ERR_UTF8] = "DG_ERR_UTF8: invalid UTF-8",
	[DG_ERR_ORDER] = "DG_ERR_ORDER: sorted keys out of order or duplicated",
	[DG_ERR_UNKNOWN_TYPE] = "DG_ERR_UNKNOWN_TYPE: type id not registered",
	[DG_ERR_UNKNOWN_SCHEMA] = "DG_ERR_UNKNOWN_SCHEMA: schema not known",
	[DG_ERR_UNKNOWN_FIELD] = "DG_ERR_UNKNOWN_FIELD: no such field",
	[DG_ERR_TYPE_MISMATCH] = "DG_ERR_TYPE_MISMATCH: value of another kind or type",
	[DG_ERR_RANGE] = "DG_ERR_RANGE: value out of range",
	[DG_ERR_TIMEOUT] = "DG_ERR_TIMEOUT: timed out",
	[DG_ERR_CLOSED] = "DG_ERR_CLOSED: closed",
	[DG_ERR_CONN_BROKEN] = "DG_ERR_CONN_BROKEN: connection to the peer broke",
	[DG_ERR_BUSY] = "DG_ERR_BUSY: queue full",
	[DG_ERR_UNREACHABLE] = "DG_ERR_UNREACHABLE: peer unreachable",
	[DG_ERR_AUTH] = "DG_ERR_AUTH: authentication failed",
	[DG_ERR_TLS] = "DG_ERR_TLS: TLS failure",
	[DG_ERR_NET] = "DG_ERR_NET: network error",
	[DG_ERR_ADDRINUSE] = "DG_ERR_ADDRINUSE: address in use",
	[DG_ERR_UNSUPPORTED] = "DG_ERR_UNSUPPORTED: no handler for the message type",
	[DG_ERR_NOT_FOUND] = "DG_ERR_NOT_FOUND: not found",
	[DG_ERR_EXISTS] = "DG_ERR_EXISTS: exists with another configuration",
	[DG_ERR_PARTITION_LOST] = "DG_ERR_PARTITION_LOST: every copy of the partition is lost",
	[DG_ERR_REMAP] = "DG_ERR_REMAP: topology changed, map again",
	[DG_ERR_STORAGE] = "DG_ERR_STORAGE: persistent storage failed",
	[DG_ERR_STORAGE_FULL] = "DG_ERR_STORAGE_FULL: persistent storage is full",
	[DG_ERR_NOT_READY] = "DG_ERR_NOT_READY: not ready",
	[DG_ERR_DEADLOCK] = "DG_ERR_DEADLOCK: deadlock victim",
	[DG_ERR_TX_CONFLICT] = "DG_ERR_TX_CONFLICT: a key read by the transaction changed",
	[DG_ERR_TX_ROLLED_BACK] = "DG_ERR_TX_ROLLED_BACK: the transaction was rolled back",
	[DG_ERR_TX_UNKNOWN] = "DG_ERR_TX_UNKNOWN: outcome not learnt in time (applied everywhere or nowhere)",
	[DG_ERR_STORAGE_DAMAGED] = "DG_ERR_STORAGE_DAMAGED: the persisted store is damaged (see the STORAGE-DAMAGED log line)",
	[DG_ERR_SEGMENTED] = "DG_ERR_SEGMENTED: this node cannot reach a majority of the cluster's voting servers",
};

const char *dg_strerror(dg_err err)
{
	if ((unsigned)err < DG_ERR__COUNT && err_names[err] != NULL)
		return err_names[err];
	return "DG_ERR_?: unknown error code";
}
