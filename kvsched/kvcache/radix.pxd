cimport cython
from kvsched.prefix cimport Prefix
from kvsched.prefix cimport block_key, common_prefix

cdef long long _TIE_SPAN, _MAX_ACCESS

cdef class _Node:
    cdef public object chain
    cdef public long long start, end
    cdef public object key
    cdef public _Node parent
    cdef public dict children
    cdef public long long lock, last_access

cdef class _Run:
    cdef public _Node node
    cdef public object prefix
    cdef public long long inserted, private, promised, done

@cython.locals(end=cython.longlong)
cdef long long _agreement(_Node node, Prefix prefix, long long limit, long long page)

cdef class RadixCache:
    cdef public long long num_blocks, block_size, capacity
    cdef public _Node root
    cdef public long long tree_tokens
    cdef public dict _runs
    cdef public long long _private_total
    cdef public long long _promised_total
    cdef public list _chunks, _grown
    cdef public long long _clock, evicted, _evictable
    cdef public list _heap
    cdef public dict _queued
    cdef public long long _tie
    cdef public _Node _matched
    cdef public object _matched_prefix
    cdef public object evicted_log
    cdef public object spill

    cdef long long _free(self)
    cpdef long long blocks_cached(self)
    cdef long long _available(self)
    @cython.locals(node=_Node, child=_Node, depth=cython.longlong, end=cython.longlong,
                   page=cython.longlong)
    cpdef list _path(self, Prefix prefix, long long limit, _Node start=*)
    cdef _Node _start(self, _Node node, long long limit)
    @cython.locals(node=_Node, child=_Node, matched=cython.longlong, now=cython.longlong, shared=cython.longlong)
    cpdef tuple _walk(self, Prefix prefix, long long limit, bint split, _Node start=*)
    @cython.locals(parent=_Node, middle=_Node)
    cpdef _Node _split(self, _Node child, long long tokens)
    @cython.locals(walk=_Node, before=cython.longlong)
    cpdef _lock(self, _Node node, long long delta)
    @cython.locals(key=cython.longlong, item=object)
    cpdef _candidate(self, _Node leaf)
    @cython.locals(end=_Node, before=cython.longlong, added=cython.longlong)
    cpdef long long _insert(self, object prefix, long long total)
    @cython.locals(node=_Node, leaf=_Node, matched=cython.longlong)
    cdef _Node _grow(self, Prefix prefix, long long total, _Node start=*)
    @cython.locals(walk=_Node, now=cython.longlong)
    cdef _refresh(self, _Node node)
    @cython.locals(freed=cython.longlong, leaf=_Node, parent=_Node, access=cython.longlong,
                   chain=object, size=cython.longlong, tokens_of=cython.longlong,
                   key=cython.longlong, item=object, queued=dict, heap=list)
    cpdef _evict(self, long long tokens)
    @cython.locals(matched=cython.longlong, node=_Node)
    cpdef long long match(self, object prefix, long long num_tokens, bint split=*)
    cpdef touch(self, object prefix, long long num_tokens)
    @cython.locals(unlocked=cython.longlong, free=cython.longlong)
    cpdef long long idle_hits(self, object prefix, long long hit_tokens)
    @cython.locals(unlocked=cython.longlong, node=_Node, shared=cython.longlong, start=_Node,
                   walk=_Node)
    cpdef long long _unlocked_on_path(self, object prefix, long long hit_tokens)
    cdef _Node _hit_start(self, Prefix prefix, long long hit_tokens)
    @cython.locals(node=_Node, matched=cython.longlong, run=_Run)
    cpdef _Run _join(self, object owner, object prefix, long long hit_tokens)
    @cython.locals(need=cython.longlong, run=_Run)
    cpdef allocate(self, object owner, object prefix, long long hit_tokens, long long num_new)
    @cython.locals(need=cython.longlong, run=_Run)
    cpdef promise(self, object owner, object prefix, long long hit_tokens, long long num_new)
    @cython.locals(run=_Run)
    cpdef computed(self, object owner, long long num_tokens)
    @cython.locals(chunks=list, size=cython.longlong, demand=cython.longlong,
                   available=cython.longlong, extend=cython.longlong, tokens=cython.longlong,
                   take=cython.longlong, runs=dict, run=_Run)
    cpdef materialize(self)
    @cython.locals(size=cython.longlong, need=cython.longlong, runs=dict, run=_Run)
    cpdef grow_promise(self, list owners)
    @cython.locals(size=cython.longlong, demand=cython.longlong, available=cython.longlong,
                   grown=list, runs=dict, run=_Run)
    cpdef decode_pass(self, long long num_decodes)
    @cython.locals(size=cython.longlong, tokens=cython.longlong, pages=cython.longlong,
                   runs=dict, run=_Run)
    cpdef grow_passes(self, list crossed)
    cpdef bint decode_evicts(self, long long num_decodes)
    cpdef evict_all(self)
    @cython.locals(available=cython.longlong)
    cpdef retract(self, object owner, long long reserve)
    @cython.locals(size=cython.longlong, need=cython.longlong, runs=dict, run=_Run)
    cpdef grow_each(self, list owners)
    @cython.locals(tokens=cython.longlong, before=cython.longlong, added=cython.longlong, dup=cython.longlong, back=cython.longlong, end=_Node, old=_Node, known=_Node, run=_Run, size=cython.longlong, prompt=cython.longlong)
    cpdef commit(self, object owner, object prefix, long long num_tokens, long long prompt_tokens=*)
    @cython.locals(tokens=cython.longlong, promised=cython.longlong, run=_Run)
    cpdef shrink(self, object owner, long long num_blocks)
    @cython.locals(run=_Run)
    cpdef free(self, object owner)
