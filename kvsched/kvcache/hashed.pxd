cimport cython
from kvsched.prefix cimport Prefix

cdef class _Owner

cdef class _Node:
    cdef public _Node parent
    cdef public object key
    cdef public object chain
    cdef public long long start, end
    cdef public dict children
    cdef public list copies
    cdef public _Owner grower

cdef class _Copy:
    cdef public _Node node
    cdef public list owners
    cdef public _Copy prev, next

cdef class _Owner:
    cdef public list copies
    cdef public long long covered, tail, committed
    cdef public _Node leaf
    cdef public object chain
    cdef public long long chain_blocks

    @cython.locals(leaf=_Node)
    cpdef let_go(self)

@cython.locals(idle=cython.longlong, start=cython.longlong, node=_Node, end=cython.longlong)
cdef long long _idle(list path)
@cython.locals(node=_Node)
cdef long long _size(_Copy copy)

cdef class HashedBlockCache:
    cdef public long long num_blocks, block_size
    cdef public _Node root
    cdef public long long _uncached_free
    cdef public _Copy _lru
    cdef public long long _lru_blocks, cached
    cdef public list _owners
    cdef public long long evicted
    cdef public object spill

    cdef long long blocks_free(self)

    @cython.locals(owners=list)
    cdef _Owner _held(self, long long owner)
    @cython.locals(held=_Owner)
    cdef _Owner _holder(self, long long owner)
    @cython.locals(owners=list, held=_Owner)
    cdef _Owner _adopt(self, long long owner)
    @cython.locals(node=_Node, child=_Node, position=cython.longlong, size=cython.longlong, end=cython.longlong)
    cpdef list _path(self, Prefix prefix, long long limit)
    @cython.locals(parent=_Node, upper=_Node, copy=_Copy, half=_Copy, after=_Copy, owner=_Owner)
    cpdef _Node _split(self, _Node node, long long position)
    @cython.locals(last=_Copy)
    cdef void _free_copy(self, _Copy copy)
    cdef void _take_copy(self, _Copy copy)
    @cython.locals(left=cython.longlong, copy=_Copy, node=_Node, size=cython.longlong)
    cpdef _evict(self, long long num_blocks)
    cpdef long long idle_hits(self, object prefix, long long hit_tokens)
    @cython.locals(held=_Owner, fresh=cython.longlong, size=cython.longlong, hit_blocks=cython.longlong, node=_Node, end=cython.longlong, copy=_Copy)
    cpdef allocate(self, long long owner, object prefix, long long hit_tokens, long long num_new)
    @cython.locals(owner=cython.longlong)
    cpdef grow_each(self, list owners)
    @cython.locals(fresh=cython.longlong)
    cdef void take_fresh(self, long long num_new) except *
    @cython.locals(held=_Owner)
    cdef void grow_tail(self, long long owner) except *
    @cython.locals(held=_Owner, size=cython.longlong, full=cython.longlong, done=cython.longlong, top=cython.longlong)
    cpdef commit(self, long long owner, object prefix, long long num_tokens, long long prompt_tokens=*)
    @cython.locals(leaf=_Node, copies=list, last=_Copy, parent=_Node, child=_Node, copy=_Copy, position=cython.longlong, size=cython.longlong, stop=cython.longlong)
    cpdef _attach(self, _Owner held, Prefix prefix, long long start, long long end)
    @cython.locals(held=_Owner, copy=_Copy)
    cpdef free(self, long long owner)
