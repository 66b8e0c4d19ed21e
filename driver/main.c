/* placeholder: replaced by the real driver */
int main(void) { return 0; }
