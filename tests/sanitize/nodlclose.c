/* LD_PRELOAD shim for the LeakSanitizer pass over the end-to-end tests (tests/sanitize/).
 *
 * Open MPI loads its components (btl, pml, coll, ...) with dlopen and unloads them with
 * dlclose before the process exits; LeakSanitizer reports at exit, when the allocations made
 * inside those components have stack frames in modules that are no longer mapped
 * ("<unknown module>"), so no suppression can name them and MPI's own one-time allocations
 * look like dtrain's leaks. Keeping every library mapped lets the report symbolize them and
 * tests/sanitize/lsan.supp suppress exactly the MPI and hwloc frames. */
int dlclose(void *handle);

int dlclose(void *handle) {
    (void)handle;
    return 0;
}
