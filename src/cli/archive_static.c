/* Linked into the static `space` only (CMakeLists.txt; not part of space_cli_lib): keeps the
 * libarchive writers that the CLI never uses out of it.
 *
 * The pax writer (tar.cc's write_tar) calls one libarchive-internal helper when handed a file
 * type tar cannot hold (a socket): __archive_write_entry_filetype_unsupported. In libarchive.a
 * (3.6 to 3.8) it shares an object file with archive_write_set_format(), whose table names every
 * writer, so linking the helper from there drags in 7-Zip, XAR, ZIP, ISO 9660, WARC, mtree and
 * their libraries: libxml2 with 30 MB of ICU data, and nettle, whose start-up CPU probe costs
 * every run. Defining the helper here, the linker never opens that object: the CLI is 5 MB
 * instead of 38 MB and starts ~0.5 ms sooner.
 *
 * If a later libarchive renames the helper, this definition is simply unused, that object is
 * linked again and the link fails on the missing libxml2/nettle symbols: add those libraries to
 * SPACE_CLI_STATIC_DEPS and delete this file. (write_tar skips sockets itself, so the helper
 * only runs if libarchive is handed some other type a tar cannot hold.) */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>

/* libarchive's error number for "the format cannot hold this" on Linux (archive_platform.h). */
#define SPACE_ARCHIVE_ERRNO_FILE_FORMAT EILSEQ

/* Same signature as in libarchive's archive_write_set_format_private.h. */
void __archive_write_entry_filetype_unsupported(struct archive* a, struct archive_entry* entry,
                                                const char* format);

void __archive_write_entry_filetype_unsupported(struct archive* a, struct archive_entry* entry,
                                                const char* format) {
  const char* what = "files of this type";
  switch (archive_entry_filetype(entry)) {
    case AE_IFSOCK:
      what = "sockets";
      break;
    case AE_IFIFO:
      what = "named pipes";
      break;
    case AE_IFCHR:
      what = "character devices";
      break;
    case AE_IFBLK:
      what = "block devices";
      break;
    case AE_IFLNK:
      what = "symbolic links";
      break;
    case AE_IFDIR:
      what = "directories";
      break;
    default:
      break;
  }
  const char* path = archive_entry_pathname(entry);
  archive_set_error(a, SPACE_ARCHIVE_ERRNO_FILE_FORMAT,
                    "%s: %s format cannot archive %s (mode 0%lo)", path != NULL ? path : "?",
                    format, what, (unsigned long)archive_entry_mode(entry));
}
