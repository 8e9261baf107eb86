/* the library's own unit test: no system call of interest */
#include "wl.h"
const char *wl_prog = "t_lib";
int wl_failed;

int main(void)
{
	char s[] = "abc";
	WL_CHECK("count_words", wl_count_words("  one two\tthree ") == 3);
	WL_CHECK("reverse", strcmp(wl_reverse(s), "cba") == 0);
	WL_CHECK("checksum", wl_checksum("Wikipedia", 9) == 0x11E60398ul);
	return wl_failed;
}
