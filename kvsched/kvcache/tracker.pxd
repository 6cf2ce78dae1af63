cimport cython
from kvsched.blocks cimport BlockPool
from kvsched.prefix cimport Prefix, extended
from kvsched.kvcache.hashed cimport HashedBlockCache
from kvsched.kvcache.radix cimport RadixCache
from kvsched.sequence cimport Seq

@cython.locals(covered=cython.longlong, prompt=cython.longlong, total=cython.longlong, more=list,
               base=Prefix)
cpdef object identity(Seq seq)

cdef class PrefixTracker:
    cdef public object cache
    cdef public HashedBlockCache hashed
    cdef public RadixCache radix
    cdef public BlockPool pool
    cdef public long long block_size, _evicted_seen
    cdef public bint eager, lagged, stepped, v0
    cdef public list _computed, _middle, _fresh
    cdef public object host
    cdef public long long host_first_tokens, host_tokens

    @cython.locals(hashed=HashedBlockCache)
    cdef long long _free(self)
    @cython.locals(hashed=HashedBlockCache)
    cdef _commit(self, Seq seq, long long num_tokens, long long prompt_tokens=*)
    cpdef long long match(self, Seq seq, bint admission=*, bint whole=*)
    @cython.locals(seq=Seq, cache=RadixCache)
    cpdef refresh(self, list seqs)
    cpdef long long hit_cost(self, Seq seq, long long hit)
    cpdef admit(self, Seq seq, long long hit, long long fresh)
    cpdef grow(self, Seq seq, long long fresh)
    @cython.locals(seq=Seq, size=cython.longlong, hashed=HashedBlockCache)
    cpdef grow_each(self, list seqs)
    cpdef shrink(self, Seq seq, long long blocks)
    cpdef computed(self, Seq seq, long long num_tokens)
    @cython.locals(size=cython.longlong, first=cython.longlong)
    cpdef long long computed_count(self, Seq seq, long long hit)
    cpdef step_ended(self)
    @cython.locals(seq=Seq, num_tokens=cython.longlong, cache=RadixCache)
    cpdef stash(self)
    @cython.locals(seq=Seq, num_tokens=cython.longlong, middle=list, finished=set,
                   cache=RadixCache)
    cpdef settle(self, list releases)
    cpdef filled(self, Seq seq)
    @cython.locals(seq=Seq, size=cython.longlong)
    cpdef filled_each(self, list seqs)
    cpdef release(self, Seq seq, long long computed)
    cpdef preempted(self, Seq seq, long long computed, long long remaining=*,
                    bint retraction=*)
    cpdef RadixCache _tree(self)
    cpdef long long blocks_cached(self)
    cpdef decode_pass(self, long long num_decodes)
    @cython.locals(size=cython.longlong)
    cpdef bint passes_fit(self, long long num_decodes, long long num_blocks)
    @cython.locals(tree=RadixCache)
    cpdef grow_passes(self, list crossed)
    cpdef bint decode_evicts(self, long long num_decodes)
    @cython.locals(total=cython.longlong, evicted=cython.longlong, hashed=HashedBlockCache)
    cpdef long long take_evicted(self)

cpdef long long _admission(Seq seq)
