/* The hostile-job suite's foreign-ABI attack: getpid through the 32-bit
 * system-call entry (int 0x80, i386 number 20) from a 64-bit x86 process.
 * Prints i386-getpid=<result>: a pid when the kernel ran it, a negative
 * errno when something refused it. Built static so the jail needs no loader. */
#include <stdio.h>

int main(void) {
	long r;
	__asm__ volatile("int $0x80" : "=a"(r) : "a"(20L) : "memory");
	printf("i386-getpid=%ld\n", r);
	fflush(stdout);
	return 0;
}
